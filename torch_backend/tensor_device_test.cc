// TensorDevice::Copy (torch_backend/tensor_device.h) on the fake device,
// where the Record that was to mark a copy's end fails with the copy
// queued (once, or every time): it succeeds once the copy ended, never
// before, or ends at its deadline with kDeadlineExceeded (the caller then
// keeps the copy's memory).
#include "torch_backend/tensor_device.h"

#include <limits>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "device/device_runtime.h"
#include "device/fake/fake_device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::torch_backend {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

TEST(TensorDeviceTest, ACopyNoEventMarksIsWaitedFor) {
  for (const int failing : {1, std::numeric_limits<int>::max()}) {
    SCOPED_TRACE(failing == 1 ? "one Record fails" : "every Record fails");
    // Before the device: they outlive its streams' copies.
    const std::vector<char> host(64, 'w');
    std::vector<char> back(64, 0);
    std::vector<char> again(64, 0);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<TensorDevice> device, TensorDevice::Fake());
    auto* fake = dynamic_cast<device::FakeDevice*>(&device->runtime());
    ASSERT_NE(fake, nullptr);
    ASSERT_OK_AND_ASSIGN(device::DeviceMemory memory, fake->Allocate(64));
    // Paused: the copy cannot end, so the call ends at its deadline, saying
    // the copy may still run. Nothing returns while paused.
    fake->Pause();
    fake->FailRecords(failing);
    const absl::Status given_up = device->Copy(memory.data(), host.data(), 64,
                                               absl::Now() + absl::Milliseconds(50), "a test copy");
    fake->Resume();
    EXPECT_THAT(given_up, StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("a test copy")));
    // Running: a refused Record costs only time; the call succeeds once
    // the copy ended.
    fake->FailRecords(failing);
    EXPECT_OK(device->Copy(back.data(), memory.data(), 64, absl::Now() + absl::Seconds(30),
                           "a test copy back"));
    EXPECT_EQ(back, host) << "returned before the copy ended";
    EXPECT_LT(fake->records_left_to_fail(), failing) << "no Record was tried";
    // Records pass again: the staging stream copies as before.
    fake->FailRecords(0);
    EXPECT_OK(device->Copy(again.data(), memory.data(), 64, absl::Now() + absl::Seconds(30),
                           "a third copy"));
    EXPECT_EQ(again, host);
  }
}

}  // namespace
}  // namespace rdmaflow::torch_backend
