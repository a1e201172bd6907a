#include "rdma/testing/in_memory_store.h"

#include <thread>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::rdma::testing {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

TEST(InMemoryStoreTest, GetWaitsForALaterSet) {
  InMemoryStore store;
  std::thread setter([&] { EXPECT_OK(store.Set("k", "v")); });
  ASSERT_OK_AND_ASSIGN(std::string value, store.Get("k", absl::Seconds(30)));
  setter.join();
  EXPECT_EQ(value, "v");
}

TEST(InMemoryStoreTest, WaitNamesMissingKeys) {
  InMemoryStore store;
  ASSERT_OK(store.Set("a", ""));
  EXPECT_THAT(store.Wait({"a", "b"}, absl::Milliseconds(10)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("b")));
}

TEST(InMemoryStoreTest, AddCountsAndRejectsNonIntegers) {
  InMemoryStore store;
  ASSERT_OK_AND_ASSIGN(int64_t v, store.Add("n", 5));
  EXPECT_EQ(v, 5);
  ASSERT_OK_AND_ASSIGN(v, store.Add("n", -2));
  EXPECT_EQ(v, 3);
  ASSERT_OK(store.Set("s", "text"));
  EXPECT_THAT(store.Add("s", 1), StatusIs(absl::StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace rdmaflow::rdma::testing
