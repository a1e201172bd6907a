// File: ibverbs_probe_test.cc
// The probe on a machine with an RDMA device (the Soft-RoCE VM of
// tools/rdma_tests.sh, which names its device in RDMAFLOW_RXE_DEV); elsewhere
// it skips, after checking the advice a machine without a device gets.
#include "rdma/ibverbs/ibverbs_probe.h"

#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::rdma::ibverbs {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

TEST(IbverbsProbeTest, NamesTheDevicePortAndGid) {
  const TransportProbeReport report = ProbeIbverbs();
  const char* device = std::getenv("RDMAFLOW_RXE_DEV");
  if (device == nullptr) {
    if (!report.usable) {
      EXPECT_THAT(report.advice, Contains(HasSubstr("RDMA device")));
      GTEST_SKIP() << "no RDMA device here (tools/rdma_tests.sh runs this in "
                      "the Soft-RoCE VM)";
    }
    GTEST_SKIP() << "an RDMA device, but not the test VM's";
  }
  EXPECT_TRUE(report.usable);
  EXPECT_THAT(report.found,
              Contains(HasSubstr(std::string(device) + " port 1, RoCE v2 GID")));
  EXPECT_TRUE(report.advice.empty());
}

}  // namespace
}  // namespace rdmaflow::rdma::ibverbs
