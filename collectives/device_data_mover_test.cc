// DeviceDataMover (collectives/device_data_mover.h) on the fake device,
// where the Record of a fence's mark fails with work queued: the fence
// succeeds once that work ended (never before), or ends at its deadline,
// trying the Record again as it waits.
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
  // Three Records refused (the mark's, the first try of the fence's own,
  // and one try again): a later try marks the copy.
  std::vector<std::byte> twice(64);
  ASSERT_OK(mover->Copy(twice.data(), scratch, 64));
  fake->FailRecords(3);
  EXPECT_OK(mover->Fence(absl::Now() + absl::Seconds(30), "the copy again"));
  EXPECT_EQ(fake->records_left_to_fail(), 0) << "the fence did not try its Record again";
  EXPECT_EQ(twice, data);
  // Marks recorded again afterwards work as before.
  ASSERT_OK(mover->Copy(again.data(), scratch, 64));
  EXPECT_OK(mover->Fence(absl::Now() + absl::Seconds(30), "a third copy"));
  EXPECT_EQ(again, data);
}

}  // namespace
}  // namespace rdmaflow::collectives
