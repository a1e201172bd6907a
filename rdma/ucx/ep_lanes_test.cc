// OneTcpLane over ucp_ep_print_info's text as UCX 1.13 prints it.
#include "rdma/ucx/ep_lanes.h"

#include <string>

#include "gtest/gtest.h"

namespace rdmaflow::rdma::ucx {
namespace {

constexpr char kHeader[] = "#\n#   UCP endpoint\n#\n#   peer: <no debug data>\n";

std::string Info(const std::string& lanes) {
  return std::string(kHeader) + lanes +
         "#\n#   am_send: 0..<egr/short>..65529..<egr/zcopy>..90763..<rndv>..(inf)\n";
}

TEST(OneTcpLaneTest, OneTcpLaneOrders) {
  EXPECT_TRUE(OneTcpLane(Info(
      "#   lane[0]:  0:tcp/lo.0 md[0]                -> md[0]/tcp/sysdev[255] "
      "rma_bw#0 am am_bw#0 wireup\n")));
  // Peer error handling adds the keepalive role to the same lane.
  EXPECT_TRUE(OneTcpLane(Info(
      "#   lane[0]:  1:tcp/eth0.0 md[1]              -> md[1]/tcp/sysdev[255] "
      "rma_bw#0 am am_bw#0 keepalive wireup\n")));
}

TEST(OneTcpLaneTest, AnythingElseDoesNot) {
  // Two interfaces: large puts are striped over both connections.
  EXPECT_FALSE(OneTcpLane(Info(
      "#   lane[0]:  1:tcp/eth0.0 md[1]              -> md[1]/tcp/sysdev[255] "
      "rma_bw#0 am am_bw#0 wireup\n"
      "#   lane[1]:  2:tcp/eth1.0 md[1]              -> md[1]/tcp/sysdev[255] rma_bw#1\n")));
  // Shared memory: the data may go by CMA and the flag by another transport.
  EXPECT_FALSE(OneTcpLane(Info(
      "#   lane[0]:  8:posix/memory.0 md[4]          -> md[4]/posix/sysdev[255] "
      "rma_bw#0 am am_bw#0 rkey_ptr\n"
      "#   lane[1]:  4:cma/memory.0 md[2]            -> md[2]/cma/sysdev[255] rma_bw#1 "
      "wireup\n")));
  EXPECT_FALSE(OneTcpLane(Info(
      "#   lane[0]:  8:sysv/memory.0 md[4]           -> md[4]/sysv/sysdev[255] "
      "rma_bw#0 am am_bw#0 wireup\n")));
  EXPECT_FALSE(OneTcpLane(Info(
      "#   lane[0]:  3:rc_mlx5/mlx5_0:1.0 md[2]      -> md[2]/ib/sysdev[255] "
      "rma_bw#0 am am_bw#0 wireup\n")));
  // A connection manager's lane, and no lanes at all.
  EXPECT_FALSE(OneTcpLane(Info("#   lane[0]: cm tcp\n")));
  EXPECT_FALSE(OneTcpLane(Info("")));
  EXPECT_FALSE(OneTcpLane(""));
  // Text of another shape.
  EXPECT_FALSE(OneTcpLane("lane[0]"));
  EXPECT_FALSE(OneTcpLane("lane[0]: x:tcp/lo.0"));
  EXPECT_FALSE(OneTcpLane("lane[0]: 0 tcp/lo.0"));
  EXPECT_FALSE(OneTcpLane("lane[0]:  0:tcpx/lo.0"));
}

TEST(TcpLaneOrdersPutsTest, OnlyTheVersionItWasCheckedFor) {
  EXPECT_TRUE(TcpLaneOrdersPuts(1, 13));
  EXPECT_FALSE(TcpLaneOrdersPuts(1, 12));
  EXPECT_FALSE(TcpLaneOrdersPuts(1, 14));
  EXPECT_FALSE(TcpLaneOrdersPuts(2, 13));
}

}  // namespace
}  // namespace rdmaflow::rdma::ucx
