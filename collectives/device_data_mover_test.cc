// DeviceDataMover (collectives/device_data_mover.h) on the fake device,
// where the Record of a mark fails with work queued: the mark is made all
// the same and reached once that work ended (never before), and a fence
// succeeds then or ends at its deadline, trying the Record again as it
// waits.
#include "collectives/device_data_mover.h"

#include <deque>
#include <limits>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "device/fake/fake_device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/builtin_transports.h"
#include "rdma/device/device_transport.h"

namespace rdmaflow::collectives {
namespace {

using ::rdmaflow::testing::IsOkAndHolds;
using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

// A DeviceDataMover over a loopback DeviceTransport on a fake device,
// with 64 bytes of scratch holding `data_`. The host buffers a test copies
// into come from Buffer(): members declared before the device, they
// outlive its streams' copies (a failed assertion may leave one queued).
class DeviceDataMoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(fake_, device::FakeDevice::Create(device::FakeDeviceOptions{}));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<rdma::Transport> host,
                         rdma::CreateBuiltinTransport("loopback", "", 0));
    ASSERT_OK_AND_ASSIGN(transport_,
                         rdma::device_path::DeviceTransport::Create(std::move(host), fake_.get()));
    ASSERT_OK_AND_ASSIGN(mover_, DeviceDataMover::Create(*transport_));
    ASSERT_OK_AND_ASSIGN(scratch_, mover_->Scratch(64));
    ASSERT_OK(mover_->Copy(scratch_, data_.data(), 64));
    ASSERT_OK(mover_->Fence(absl::Now() + absl::Seconds(30), "the upload"));
  }

  // A failed assertion may leave the device paused or refusing Records:
  // the mover's end fences, and a free waits for Resume().
  void TearDown() override {
    if (fake_ == nullptr) return;
    fake_->Resume();
    fake_->FailRecords(0);
  }

  std::vector<std::byte>& Buffer() { return buffers_.emplace_back(64); }

  const std::vector<std::byte> data_ = std::vector<std::byte>(64, std::byte{'m'});
  std::deque<std::vector<std::byte>> buffers_;
  std::unique_ptr<device::FakeDevice> fake_;
  std::unique_ptr<rdma::device_path::DeviceTransport> transport_;
  std::unique_ptr<DeviceDataMover> mover_;
  std::byte* scratch_ = nullptr;
};

TEST_F(DeviceDataMoverTest, AFenceWhoseMarkIsNotRecordedWaitsForTheStream) {
  // Paused: the copy cannot end, so the fence ends at its deadline.
  // Nothing returns while paused.
  std::vector<std::byte>& held = Buffer();
  fake_->Pause();
  const absl::Status queued = mover_->Copy(held.data(), scratch_, 64);
  fake_->FailRecords(1);
  const absl::Status paused =
      mover_->Fence(absl::Now() + absl::Milliseconds(50), "the paused copy");
  fake_->Resume();
  ASSERT_OK(queued);
  EXPECT_THAT(paused, StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("the paused copy")));
  // Paused with every Record refused: the deadline says why no event could
  // tell.
  std::vector<std::byte>& refused = Buffer();
  fake_->Pause();
  const absl::Status queued_again = mover_->Copy(refused.data(), scratch_, 64);
  fake_->FailRecords(std::numeric_limits<int>::max());
  const absl::Status unmarked_paused =
      mover_->Fence(absl::Now() + absl::Milliseconds(50), "the refused copy");
  fake_->FailRecords(0);
  fake_->Resume();
  ASSERT_OK(queued_again);
  EXPECT_THAT(unmarked_paused,
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       ::testing::AllOf(HasSubstr("the refused copy"),
                                        HasSubstr("the device refused its Record"))));
  // Running, every Record refused: the fence succeeds once the copy ended
  // (the stream went idle), never before.
  std::vector<std::byte>& back = Buffer();
  ASSERT_OK(mover_->Copy(back.data(), scratch_, 64));
  fake_->FailRecords(std::numeric_limits<int>::max());
  const absl::Status unmarked = mover_->Fence(absl::Now() + absl::Seconds(30), "the copy back");
  fake_->FailRecords(0);
  EXPECT_OK(unmarked);
  EXPECT_EQ(back, data_) << "the fence returned before the copy ended";
  // Two Records refused: the fence's mark's, and the try again its first
  // look makes before it asks whether the stream is idle (a later look
  // tries again too, unless the stream was idle already).
  std::vector<std::byte>& twice = Buffer();
  ASSERT_OK(mover_->Copy(twice.data(), scratch_, 64));
  fake_->FailRecords(2);
  EXPECT_OK(mover_->Fence(absl::Now() + absl::Seconds(30), "the copy again"));
  EXPECT_EQ(fake_->records_left_to_fail(), 0) << "the fence did not try its Record again";
  EXPECT_EQ(twice, data_);
  // Marks recorded again afterwards work as before.
  std::vector<std::byte>& again = Buffer();
  ASSERT_OK(mover_->Copy(again.data(), scratch_, 64));
  EXPECT_OK(mover_->Fence(absl::Now() + absl::Seconds(30), "a third copy"));
  EXPECT_EQ(again, data_);
}

// Paused, an earlier mark's Record taken and the fence's refused: the
// deadline says the fence's own work has no event, whatever the marks
// before it have.
TEST_F(DeviceDataMoverTest, AFenceBehindARecordedMarkSaysItsOwnRecordWasRefused) {
  std::vector<std::byte>& earlier = Buffer();
  std::vector<std::byte>& later = Buffer();
  fake_->Pause();
  ASSERT_OK(mover_->Copy(earlier.data(), scratch_, 64));
  ASSERT_OK(mover_->Mark().status());
  ASSERT_OK(mover_->Copy(later.data(), scratch_, 64));
  fake_->FailRecords(std::numeric_limits<int>::max());
  const absl::Status behind_a_mark =
      mover_->Fence(absl::Now() + absl::Milliseconds(50), "the copy behind a mark");
  fake_->FailRecords(0);
  fake_->Resume();
  EXPECT_THAT(behind_a_mark,
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       ::testing::AllOf(HasSubstr("the copy behind a mark"),
                                        HasSubstr("the device refused its Record"))));
  // Running again, the fence ends once both copies did.
  EXPECT_OK(mover_->Fence(absl::Now() + absl::Seconds(30), "both copies"));
  EXPECT_EQ(earlier, data_);
  EXPECT_EQ(later, data_);
}

// A protocol's marks (HostAllReduce publishes a chunk once its mark is
// reached) with every Record refused: each mark is made, and reached only
// once the work before it ended.
TEST_F(DeviceDataMoverTest, MarksWhoseRecordsAreRefusedAreReachedOnceTheirWorkEnded) {
  std::vector<std::byte>& first = Buffer();
  std::vector<std::byte>& second = Buffer();
  fake_->Pause();
  fake_->FailRecords(std::numeric_limits<int>::max());
  ASSERT_OK(mover_->Copy(first.data(), scratch_, 64));
  ASSERT_OK_AND_ASSIGN(const uint64_t one, mover_->Mark());
  ASSERT_OK(mover_->Copy(second.data(), scratch_, 64));
  ASSERT_OK_AND_ASSIGN(const uint64_t two, mover_->Mark());
  EXPECT_EQ(two, one + 1);
  // Paused, nothing ran: neither mark is reached, however often asked.
  for (int look = 0; look < 3; ++look) {
    EXPECT_THAT(mover_->Reached(one), IsOkAndHolds(false));
    EXPECT_THAT(mover_->Reached(two), IsOkAndHolds(false));
  }
  fake_->Resume();
  EXPECT_OK(PollUntil([&] { return mover_->Reached(two); }, absl::Now() + absl::Seconds(30),
                      "the second mark"));
  EXPECT_THAT(mover_->Reached(one), IsOkAndHolds(true));
  EXPECT_EQ(first, data_) << "a mark was reached before its copy ended";
  EXPECT_EQ(second, data_) << "a mark was reached before its copy ended";
  // Records accepted again: the next mark is an event's, reached as before.
  fake_->FailRecords(0);
  std::vector<std::byte>& third = Buffer();
  ASSERT_OK(mover_->Copy(third.data(), scratch_, 64));
  ASSERT_OK_AND_ASSIGN(const uint64_t three, mover_->Mark());
  EXPECT_OK(PollUntil([&] { return mover_->Reached(three); }, absl::Now() + absl::Seconds(30),
                      "the third mark"));
  EXPECT_EQ(third, data_);
  EXPECT_THAT(mover_->Reached(three + 1), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace rdmaflow::collectives
