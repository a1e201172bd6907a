// DeviceDataMover (collectives/device_data_mover.h) on the fake device,
// where the Record of a mark fails with work queued: the mark is made all
// the same and reached once that work ended (never before), and a fence
// succeeds then or ends at its deadline, trying the Record again as it
// waits.
#include "collectives/device_data_mover.h"

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

TEST(DeviceDataMoverTest, AFenceWhoseMarkIsNotRecordedWaitsForTheStream) {
  // Before the device: they outlive its streams' copies.
  const std::vector<std::byte> data(64, std::byte{'m'});
  std::vector<std::byte> back(64);
  std::vector<std::byte> again(64);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<device::FakeDevice> fake,
                       device::FakeDevice::Create(device::FakeDeviceOptions{}));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<rdma::Transport> host,
                       rdma::CreateBuiltinTransport("loopback", "", 0));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<rdma::device_path::DeviceTransport> transport,
                       rdma::device_path::DeviceTransport::Create(std::move(host), fake.get()));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceDataMover> mover, DeviceDataMover::Create(*transport));
  ASSERT_OK_AND_ASSIGN(std::byte * scratch, mover->Scratch(64));
  // Paused: the copy cannot end, so the fence ends at its deadline.
  // Nothing returns while paused.
  fake->Pause();
  const absl::Status queued = mover->Copy(scratch, data.data(), 64);
  fake->FailRecords(1);
  const absl::Status paused = mover->Fence(absl::Now() + absl::Milliseconds(50), "the paused copy");
  fake->Resume();
  ASSERT_OK(queued);
  EXPECT_THAT(paused, StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("the paused copy")));
  // Running, every Record refused: the fence succeeds once the copy ended
  // (the stream went idle), never before.
  ASSERT_OK(mover->Copy(back.data(), scratch, 64));
  fake->FailRecords(std::numeric_limits<int>::max());
  const absl::Status unmarked = mover->Fence(absl::Now() + absl::Seconds(30), "the copy back");
  fake->FailRecords(0);
  EXPECT_OK(unmarked);
  EXPECT_EQ(back, data) << "the fence returned before the copy ended";
  // Two Records refused: the fence's mark's, and the try again its first
  // look makes before it asks whether the stream is idle (a later look
  // tries again too, unless the stream was idle already).
  std::vector<std::byte> twice(64);
  ASSERT_OK(mover->Copy(twice.data(), scratch, 64));
  fake->FailRecords(2);
  EXPECT_OK(mover->Fence(absl::Now() + absl::Seconds(30), "the copy again"));
  EXPECT_EQ(fake->records_left_to_fail(), 0) << "the fence did not try its Record again";
  EXPECT_EQ(twice, data);
  // Marks recorded again afterwards work as before.
  ASSERT_OK(mover->Copy(again.data(), scratch, 64));
  EXPECT_OK(mover->Fence(absl::Now() + absl::Seconds(30), "a third copy"));
  EXPECT_EQ(again, data);
}

// A protocol's marks (HostAllReduce publishes a chunk once its mark is
// reached) with every Record refused: each mark is made, reached only once
// the work before it ended, and in order; the events come back to use.
TEST(DeviceDataMoverTest, MarksWhoseRecordsAreRefusedAreReachedOnceTheirWorkEnded) {
  const std::vector<std::byte> data(64, std::byte{'r'});
  std::vector<std::byte> first(64), second(64), third(64);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<device::FakeDevice> fake,
                       device::FakeDevice::Create(device::FakeDeviceOptions{}));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<rdma::Transport> host,
                       rdma::CreateBuiltinTransport("loopback", "", 0));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<rdma::device_path::DeviceTransport> transport,
                       rdma::device_path::DeviceTransport::Create(std::move(host), fake.get()));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceDataMover> mover, DeviceDataMover::Create(*transport));
  ASSERT_OK_AND_ASSIGN(std::byte * scratch, mover->Scratch(64));
  ASSERT_OK(mover->Copy(scratch, data.data(), 64));
  ASSERT_OK(mover->Fence(absl::Now() + absl::Seconds(30), "the upload"));
  fake->Pause();
  fake->FailRecords(std::numeric_limits<int>::max());
  ASSERT_OK(mover->Copy(first.data(), scratch, 64));
  ASSERT_OK_AND_ASSIGN(const uint64_t one, mover->Mark());
  ASSERT_OK(mover->Copy(second.data(), scratch, 64));
  ASSERT_OK_AND_ASSIGN(const uint64_t two, mover->Mark());
  EXPECT_EQ(two, one + 1);
  // Paused, nothing ran: neither mark is reached, however often asked.
  for (int look = 0; look < 3; ++look) {
    EXPECT_THAT(mover->Reached(one), IsOkAndHolds(false));
    EXPECT_THAT(mover->Reached(two), IsOkAndHolds(false));
  }
  fake->Resume();
  EXPECT_OK(PollUntil([&] { return mover->Reached(two); }, absl::Now() + absl::Seconds(30),
                      "the second mark"));
  EXPECT_THAT(mover->Reached(one), IsOkAndHolds(true));  // in order
  EXPECT_EQ(first, data) << "a mark was reached before its copy ended";
  EXPECT_EQ(second, data) << "a mark was reached before its copy ended";
  // Records accepted again: the next mark is an event's, reached as before.
  fake->FailRecords(0);
  ASSERT_OK(mover->Copy(third.data(), scratch, 64));
  ASSERT_OK_AND_ASSIGN(const uint64_t three, mover->Mark());
  EXPECT_OK(PollUntil([&] { return mover->Reached(three); }, absl::Now() + absl::Seconds(30),
                      "the third mark"));
  EXPECT_EQ(third, data);
  EXPECT_THAT(mover->Reached(three + 1), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace rdmaflow::collectives
