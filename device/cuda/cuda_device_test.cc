// CudaDevice::Create on any machine: a device where one answers, else
// kUnavailable saying what CUDA said, never a crash or another code.
#include "device/cuda/cuda_device.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::device {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(CudaDeviceTest, CreateFindsADeviceOrSaysWhyNot) {
  absl::StatusOr<std::unique_ptr<CudaDevice>> device = CudaDevice::Create(0);
  if (device.ok()) {
    EXPECT_THAT((*device)->name(), StartsWith("cuda:0 ("));
    ASSERT_OK_AND_ASSIGN(DeviceMemory memory, (*device)->Allocate(4096));
    ASSERT_OK_AND_ASSIGN(PointerInfo info, (*device)->Query(memory.data()));
    EXPECT_EQ(info.kind, MemoryKind::kDevice);
  } else {
    std::printf("no CUDA device here: %s\n", device.status().ToString().c_str());
    EXPECT_THAT(device.status(),
                StatusIs(absl::StatusCode::kUnavailable,
                         AnyOf(HasSubstr("cudaGetDeviceCount"), HasSubstr("no device"))));
  }
  // A device that no machine has.
  EXPECT_THAT(CudaDevice::Create(1 << 20), StatusIs(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace rdmaflow::device
