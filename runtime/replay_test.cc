// Tests of the replayer's own contract: what it checks and what it reads
// (SumWords), over a two-rank plan and an in-memory stand-in for the wire.
#include "runtime/replay.h"

#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "graph_analyzer/graph_builder.h"
#include "graph_analyzer/planner.h"
#include "gtest/gtest.h"

namespace rdmaflow::runtime {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

// Both ranks' communicators share one map from transfer id to the bytes
// last sent; `corrupt` flips a byte of what is received.
struct Wire {
  std::map<int, std::vector<std::byte>> tensors;
  std::map<int, std::vector<int64_t>> shapes;
  bool corrupt = false;
};

class WireCommunicator final : public Communicator {
 public:
  explicit WireCommunicator(Wire& wire) : wire_(wire) {}
  std::string name() const override { return "wire"; }
  absl::Status Send(int id, OutgoingTensor tensor) override {
    wire_.tensors[id].assign(tensor.data, tensor.data + tensor.bytes);
    wire_.shapes[id] = tensor.shape;
    return absl::OkStatus();
  }
  absl::StatusOr<ReceivedTensor> Recv(int id) override {
    auto it = wire_.tensors.find(id);
    if (it == wire_.tensors.end()) return absl::NotFoundError("not sent");
    received_ = it->second;
    if (wire_.corrupt) received_[received_.size() / 2] ^= std::byte{1};
    return ReceivedTensor(received_.data(), received_.size(),
                          wire_.shapes[id], nullptr);
  }
  absl::Status WaitSendsDone() override { return absl::OkStatus(); }
  absl::StatusOr<bool> Ready(int id) override { return true; }
  absl::Status FinishStep() override { return absl::OkStatus(); }
  absl::Status Shutdown() override { return absl::OkStatus(); }
  TransferCounters counters() const override { return {}; }

 private:
  Wire& wire_;
  std::vector<std::byte> received_;
};

// Rank 0 sends one float32 tensor of `floats` elements to rank 1.
plan::TransferPlan OneTensorPlan(int64_t floats) {
  graph::GraphBuilder b("one_tensor");
  b.SetWorldSize(2);
  b.SetRank(0);
  const std::string x = b.Placeholder("x", graph::DT_FLOAT32, {floats});
  b.SetRank(1);
  b.Op("y", "Identity", {x});
  absl::StatusOr<plan::TransferPlan> plan =
      graph::PlanGraph(std::move(b).Build(), {});
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *plan;
}

TEST(SumWordsTest, AddsEveryWordAndTheTail) {
  std::vector<std::byte> bytes(8 * 3 + 3);
  const uint64_t words[3] = {1, uint64_t{1} << 40, ~uint64_t{0}};
  std::memcpy(bytes.data(), words, sizeof(words));
  bytes[24] = std::byte{5};
  bytes[25] = std::byte{0};
  bytes[26] = std::byte{0};
  uint64_t tail = 0;
  std::memcpy(&tail, bytes.data() + 24, 3);
  // ~0 wraps: 1 + 2^40 + (2^64 - 1) == 2^40 (mod 2^64).
  EXPECT_EQ(SumWords(bytes.data(), bytes.size()), (uint64_t{1} << 40) + tail);
  EXPECT_EQ(SumWords(bytes.data(), 0), 0u);
  bytes[3] = std::byte{0x7f};  // changing any byte changes the sum
  EXPECT_NE(SumWords(bytes.data(), bytes.size()), (uint64_t{1} << 40) + tail);
}

// The rounds of eight words, the words after them and the tail, at every
// length up to 40 words and at an unaligned start, against one word at a
// time.
TEST(SumWordsTest, EveryLengthAndAlignmentAgreesWithOneWordAtATime) {
  std::vector<std::byte> bytes(8 * 40 + 8 + 1);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::byte(i * 131 + 7);
  for (size_t start : {0, 1, 5}) {
    for (size_t length = 0; length + start <= 8 * 40 + 7; ++length) {
      const std::byte* data = bytes.data() + start;
      uint64_t expected = 0;
      for (size_t i = 0; i + 8 <= length; i += 8) {
        uint64_t w;
        std::memcpy(&w, data + i, 8);
        expected += w;
      }
      uint64_t tail = 0;
      std::memcpy(&tail, data + length / 8 * 8, length % 8);
      EXPECT_EQ(SumWords(data, length), expected + tail)
          << "start " << start << ", " << length << " bytes";
    }
  }
}

class ReplayVerifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    plan_ = OneTensorPlan(/*floats=*/1001);  // 4004 bytes: a 4-byte tail
    ReplayOptions options;
    options.vary_content = true;
    ASSERT_OK_AND_ASSIGN(sender_, Replayer::Create(plan_, 0, options));
    ASSERT_OK_AND_ASSIGN(receiver_, Replayer::Create(plan_, 1, options));
  }
  absl::Status Step(int64_t step) {
    RETURN_IF_ERROR(sender_->RunStep(send_comm_, step).status());
    return receiver_->RunStep(recv_comm_, step).status();
  }

  plan::TransferPlan plan_;
  Wire wire_;
  WireCommunicator send_comm_{wire_};
  WireCommunicator recv_comm_{wire_};
  std::unique_ptr<Replayer> sender_;
  std::unique_ptr<Replayer> receiver_;
};

TEST_F(ReplayVerifyTest, VerifyingStepsCatchACorruptByte) {
  ASSERT_OK(Step(0));
  EXPECT_EQ(receiver_->received_sum(), 0u) << "verified steps are not summed";
  wire_.corrupt = true;
  EXPECT_THAT(Step(1), StatusIs(absl::StatusCode::kDataLoss,
                                HasSubstr("arrived corrupt at step 1")));
}

TEST_F(ReplayVerifyTest, UnverifiedStepsStillReadEveryReceivedByte) {
  receiver_->set_verify(false);
  ASSERT_OK(Step(0));
  ASSERT_OK(Step(1));
  // The receiver read exactly the two tensors the pattern says were sent.
  std::vector<std::byte> sent(4004);
  uint64_t expected = 0;
  for (int64_t step : {0, 1}) {
    FillPattern(1, receiver_->rank_plan().recvs()[0].id, step, sent.data(), sent.size());
    expected += SumWords(sent.data(), sent.size());
  }
  EXPECT_EQ(receiver_->received_sum(), expected);
  // Not checked: a corrupt tensor passes, and is read (the sum moves).
  wire_.corrupt = true;
  const uint64_t before = receiver_->received_sum();
  ASSERT_OK(Step(2));
  FillPattern(1, receiver_->rank_plan().recvs()[0].id, 2, sent.data(), sent.size());
  EXPECT_NE(receiver_->received_sum() - before,
            SumWords(sent.data(), sent.size()));
  // Turned back on, the check is back.
  receiver_->set_verify(true);
  EXPECT_THAT(Step(3), StatusIs(absl::StatusCode::kDataLoss));
}

}  // namespace
}  // namespace rdmaflow::runtime
