// File: sparse_message_test.cc
// The sparse codecs' message as a forging peer would write it: every field
// that does not fit is refused before a value is added.
#include "compression/sparse_message.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace rdmaflow::compression {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

std::vector<std::byte> Message(uint64_t step, const std::vector<uint32_t>& indices,
                               const std::vector<float>& source) {
  std::vector<std::byte> m(SparseMessageBytes(indices.size()));
  EXPECT_EQ(WriteSparseMessage(step, indices, source, absl::MakeSpan(m)), m.size());
  return m;
}

TEST(SparseMessageTest, AddsEveryPairScaled) {
  const std::vector<float> source = {1, 2, 3, 4, 5};
  const std::vector<std::byte> m = Message(7, {0, 3, 4}, source);
  std::vector<float> out(5, 1.0f);
  ASSERT_OK(AddSparseMessage(m, 7, 3, 1, absl::MakeSpan(out), 0.5f));
  EXPECT_EQ(out, (std::vector<float>{1.5f, 1, 1, 3, 3.5f}));
  std::vector<float> empty_out(5, 0.0f);
  ASSERT_OK(AddSparseMessage(Message(7, {}, source), 7, 3, 1, absl::MakeSpan(empty_out), 1));
  EXPECT_EQ(empty_out, std::vector<float>(5, 0.0f));
}

// Values are never checked: a NaN or infinity in a peer's gradient (an
// fp16 overflow) reaches the sum as it would through NCCL, where a loss
// scaler sees it and skips the step. Refusing it would fail the collective.
TEST(SparseMessageTest, AddsNonFiniteValuesAsTheyAre) {
  const std::vector<float> source = {std::numeric_limits<float>::quiet_NaN(),
                                     std::numeric_limits<float>::infinity(), 2};
  const std::vector<std::byte> m = Message(4, {0, 1, 2}, source);
  std::vector<float> out(3, 1.0f);
  ASSERT_OK(AddSparseMessage(m, 4, 3, 1, absl::MakeSpan(out), 1.0f));
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_EQ(out[1], std::numeric_limits<float>::infinity());
  EXPECT_EQ(out[2], 3.0f);
}

struct Forgery {
  const char* what;
  std::function<void(std::vector<std::byte>&)> forge;
  const char* message;
};

TEST(SparseMessageTest, RefusesEveryForgedFieldAndLeavesTheOutputAlone) {
  const std::vector<float> source = {1, 2, 3, 4, 5, 6, 7, 8};
  auto put32 = [](std::vector<std::byte>& m, size_t at, uint32_t v) {
    std::memcpy(m.data() + at, &v, 4);
  };
  const std::vector<Forgery> forgeries = {
      {"short", [](auto& m) { m.resize(10); }, "shorter than its header"},
      {"magic", [&](auto& m) { put32(m, 0, 0xdeadbeef); }, "bad magic"},
      {"step", [](auto& m) { m[8] = std::byte{9}; }, "stamped step 9, expected 7"},
      {"too many pairs", [&](auto& m) { put32(m, 4, 0xffffffffu); }, "more than the 4"},
      {"length", [](auto& m) { m.push_back(std::byte{0}); }, "expected"},
      {"fewer pairs than bytes", [&](auto& m) { put32(m, 4, 2); }, "expected"},
      {"index beyond", [&](auto& m) { put32(m, 16 + 4 * 2, 8); }, "beyond the tensor's 8"},
      {"index repeated", [&](auto& m) { put32(m, 16 + 4 * 1, 1); }, "not above"},
      {"index falling", [&](auto& m) { put32(m, 16 + 4 * 1, 0); }, "not above"},
  };
  for (const Forgery& f : forgeries) {
    std::vector<std::byte> m = Message(7, {1, 4, 6}, source);
    f.forge(m);
    std::vector<float> out(8, 0.25f);
    EXPECT_THAT(AddSparseMessage(m, 7, 4, 2, absl::MakeSpan(out), 1.0f),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr(f.message)))
        << f.what;
    EXPECT_EQ(out, std::vector<float>(8, 0.25f)) << f.what;
  }
}

}  // namespace
}  // namespace rdmaflow::compression
