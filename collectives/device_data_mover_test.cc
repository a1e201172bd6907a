// DeviceDataMover (collectives/device_data_mover.h) on the fake device,
// where the Record of a fence's mark fails with work queued: the fence
// returns only once that work ended, or at its deadline, trying the
// Record again as it waits.
#include "collectives/device_data_mover.h"

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
using ::testing::AllOf;
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
  // Running: the fence fails with the Record's error once the copy ended.
  ASSERT_OK(mover->Copy(back.data(), scratch, 64));
  fake->FailRecords(1);
  EXPECT_THAT(mover->Fence(absl::Now() + absl::Seconds(30), "the copy back"),
              StatusIs(absl::StatusCode::kInternal,
                       AllOf(HasSubstr("the copy back"), HasSubstr("marking its end failed"),
                             HasSubstr("injected"))));
  EXPECT_EQ(back, data) << "the fence returned before the copy ended";
  // Two Records refused (the mark's, and the first try of the fence's
  // own): a Record tried again marks the copy, before the stream drains.
  ASSERT_OK(mover->Copy(back.data(), scratch, 64));
  fake->FailRecords(2);
  EXPECT_THAT(mover->Fence(absl::Now() + absl::Seconds(30), "the copy again"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("marking its end failed")));
  EXPECT_EQ(fake->records_left_to_fail(), 0) << "the fence did not try its Record again";
  // Marks recorded again afterwards work as before.
  ASSERT_OK(mover->Copy(again.data(), scratch, 64));
  EXPECT_OK(mover->Fence(absl::Now() + absl::Seconds(30), "a third copy"));
  EXPECT_EQ(again, data);
}

}  // namespace
}  // namespace rdmaflow::collectives
