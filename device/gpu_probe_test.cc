// File: gpu_probe_test.cc
#include "device/gpu_probe.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::device {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

// Where no driver answers (CI), the reason; where one does (the H200), each
// GPU with a name, a compute capability and its memory.
TEST(GpuProbeTest, ListsTheGpusOrSaysWhyNot) {
  absl::StatusOr<GpuReport> report = ProbeGpus();
  if (!report.ok()) {
    EXPECT_EQ(report.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(report.status().message(),
                AnyOf(HasSubstr("no CUDA driver"), HasSubstr("did not start")));
    GTEST_SKIP() << report.status();
  }
  EXPECT_GT(report->driver_version, 0);
  for (const GpuInfo& gpu : report->gpus) {
    EXPECT_FALSE(gpu.name.empty());
    EXPECT_GE(gpu.major, 3);
    EXPECT_GT(gpu.memory_bytes, 0u);
  }
}

}  // namespace
}  // namespace rdmaflow::device
