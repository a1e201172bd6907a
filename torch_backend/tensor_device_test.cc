// TensorDevice::Copy (torch_backend/tensor_device.h) on the fake device,
// where the Record that was to mark a copy's end fails with the copy
// queued: it returns only once the copy ended, or at its deadline with
// kDeadlineExceeded (the caller then keeps the copy's memory).
#include "torch_backend/tensor_device.h"

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

TEST(TensorDeviceTest, ACopyNoEventMarksIsWaitedForThroughItsStream) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<TensorDevice> device, TensorDevice::Fake());
  auto* fake = dynamic_cast<device::FakeDevice*>(&device->runtime());
  ASSERT_NE(fake, nullptr);
  ASSERT_OK_AND_ASSIGN(device::DeviceMemory memory, fake->Allocate(64));
  const std::vector<char> host(64, 'w');  // outlives the copies
  // Paused: the copy cannot end, so the call ends at its deadline, saying
  // the copy may still run. Nothing returns while paused.
  fake->Pause();
  fake->FailNextRecord();
  const absl::Status given_up = device->Copy(memory.data(), host.data(), 64,
                                             absl::Now() + absl::Milliseconds(50), "a test copy");
  fake->Resume();
  EXPECT_THAT(given_up, StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("a test copy")));
  // Running: the call returns the Record's error once the copy ended.
  std::vector<char> back(64, 0);
  fake->FailNextRecord();
  EXPECT_THAT(device->Copy(back.data(), memory.data(), 64, absl::Now() + absl::Seconds(30),
                           "a test copy back"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("injected")));
  EXPECT_EQ(back, host) << "returned before the copy ended";
  // The staging stream still copies (renewed after the failure).
  std::vector<char> again(64, 0);
  EXPECT_OK(device->Copy(again.data(), memory.data(), 64, absl::Now() + absl::Seconds(30),
                         "a third copy"));
  EXPECT_EQ(again, host);
}

}  // namespace
}  // namespace rdmaflow::torch_backend
