// Annotate keeps the code and prefixes the message; OK stays OK.
#include "common/annotate.h"

#include "gtest/gtest.h"

namespace rdmaflow {
namespace {

TEST(AnnotateTest, PrefixesTheMessageAndKeepsTheCode) {
  const absl::Status annotated =
      Annotate(absl::DeadlineExceededError("rank 1 never joined"), "ring 'x' on rank 0");
  EXPECT_EQ(annotated.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(annotated.message(), "ring 'x' on rank 0: rank 1 never joined");
}

TEST(AnnotateTest, LeavesOkAlone) {
  EXPECT_TRUE(Annotate(absl::OkStatus(), "anywhere").ok());
}

}  // namespace
}  // namespace rdmaflow
