// File: ibverbs_unit_test.cc
// The parts of the ibverbs backend that need no RDMA device: the handshake
// (over loopback TCP), peer-death detection through its connection, remote
// key packing, work-completion error mapping, and a clear kUnavailable when
// no device exists.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/ibverbs/bootstrap.h"
#include "rdma/ibverbs/ibverbs_internal.h"
#include "rdma/ibverbs/ibverbs_status.h"
#include "rdma/ibverbs/ibverbs_transport.h"

namespace rdmaflow::rdma::ibverbs {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::AnyOf;
using ::testing::HasSubstr;

QueuePairInfo SampleInfo(int rank) {
  QueuePairInfo info;
  info.rank = rank;
  info.qpn = 0x1234 + rank;
  info.psn = 0xabcdef;
  info.lid = 7;
  for (int i = 0; i < 16; ++i) info.gid.raw[i] = i * 3;
  info.mtu = IBV_MTU_1024;
  info.marker_address = 0x7f0000001000;
  info.marker_rkey = 0x55aa;
  return info;
}

void ExpectSame(const QueuePairInfo& a, const QueuePairInfo& b) {
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.qpn, b.qpn);
  EXPECT_EQ(a.psn, b.psn);
  EXPECT_EQ(a.lid, b.lid);
  EXPECT_EQ(0, memcmp(a.gid.raw, b.gid.raw, 16));
  EXPECT_EQ(a.mtu, b.mtu);
  EXPECT_EQ(a.marker_address, b.marker_address);
  EXPECT_EQ(a.marker_rkey, b.marker_rkey);
}

TEST(BootstrapTest, QueuePairInfoRoundTrips) {
  QueuePairInfo info = SampleInfo(3);
  ASSERT_OK_AND_ASSIGN(QueuePairInfo decoded,
                       DecodeQueuePairInfo(EncodeQueuePairInfo(info)));
  ExpectSame(info, decoded);
  std::string bytes = EncodeQueuePairInfo(info);
  EXPECT_THAT(DecodeQueuePairInfo(bytes.substr(1)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  bytes[0] ^= 1;
  EXPECT_THAT(DecodeQueuePairInfo(bytes),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("another version")));
}

TEST(BootstrapTest, HandshakeExchangesInfoAndKeepsTheConnection) {
  std::atomic<int> calls{0};
  ASSERT_OK_AND_ASSIGN(
      auto listener, BootstrapListener::Start([&](const QueuePairInfo& r) {
        ++calls;
        EXPECT_EQ(r.rank, 0);
        return absl::StatusOr<QueuePairInfo>(SampleInfo(1));
      }));
  ASSERT_OK_AND_ASSIGN(Handshake handshake,
                       ExchangeQueuePairInfo("127.0.0.1", listener->port(),
                                             SampleInfo(0), absl::Seconds(5)));
  ExpectSame(handshake.remote, SampleInfo(1));
  EXPECT_EQ(calls.load(), 1);
  // The listener keeps its end open while it lives...
  EXPECT_FALSE(PeerClosed(handshake.connection.get()));
  // ...and the connection reports the peer gone once it is destroyed.
  listener.reset();
  EXPECT_TRUE(PeerClosed(handshake.connection.get()));
}

TEST(BootstrapTest, RefusedHandshakeCarriesThePeersReason) {
  ASSERT_OK_AND_ASSIGN(auto listener,
                       BootstrapListener::Start([](const QueuePairInfo&) {
                         return absl::StatusOr<QueuePairInfo>(
                             absl::ResourceExhaustedError("no more QPs"));
                       }));
  EXPECT_THAT(ExchangeQueuePairInfo("127.0.0.1", listener->port(),
                                    SampleInfo(0), absl::Seconds(5)),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("refused the connection: no more QPs")));
}

TEST(BootstrapTest, UnreachablePeerIsUnavailable) {
  // A port nobody listens on: bind one, then close it.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(fd);
  EXPECT_THAT(ExchangeQueuePairInfo("127.0.0.1", ntohs(addr.sin_port),
                                    SampleInfo(0), absl::Seconds(2)),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("handshake with 127.0.0.1")));
}

TEST(KeyTest, PackedKeysRoundTripAndForeignOnesAreRejected) {
  ASSERT_OK_AND_ASSIGN(uint32_t rkey, UnpackKey(PackKey(0xdeadbeef), 1));
  EXPECT_EQ(rkey, 0xdeadbeefu);
  EXPECT_THAT(UnpackKey("garbage key", 4),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rank 4")));
  EXPECT_THAT(UnpackKey("XXXX1234", 4),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(StatusTest, WorkCompletionErrorsMapToActionableCodes) {
  EXPECT_THAT(WorkCompletionError(IBV_WC_REM_ACCESS_ERR, 3, "write"),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("rank 3")));
  EXPECT_THAT(WorkCompletionError(IBV_WC_RETRY_EXC_ERR, 3, "read"),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("rank 3 did not answer")));
  EXPECT_THAT(WorkCompletionError(IBV_WC_WR_FLUSH_ERR, 3, "write"),
              StatusIs(absl::StatusCode::kCancelled));
  EXPECT_THAT(WorkCompletionError(IBV_WC_LOC_PROT_ERR, 3, "write"),
              StatusIs(absl::StatusCode::kInternal));
  EXPECT_THAT(VerbsError(ENOMEM, "ibv_create_qp"),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("ibv_create_qp")));
}

TEST(TransportTest, CreateWorksOrSaysWhyNot) {
  IbverbsTransportOptions options;
  absl::StatusOr<std::unique_ptr<IbverbsTransport>> transport =
      IbverbsTransport::Create(options);
  if (transport.ok()) {
    EXPECT_EQ((*transport)->capabilities().backend, "ibverbs");
    return;
  }
  // No device here: the reason says what to do.
  EXPECT_THAT(transport.status(),
              StatusIs(absl::StatusCode::kUnavailable,
                       AnyOf(HasSubstr("rdma link add"),
                             HasSubstr("active port"))));
  options.device.device = "no_such_device";
  EXPECT_THAT(IbverbsTransport::Create(options),
              StatusIs(absl::StatusCode::kUnavailable));
}

TEST(TransportTest, BadOptionsAreInvalidArguments) {
  IbverbsTransportOptions options;
  options.signal_every = 0;
  EXPECT_THAT(IbverbsTransport::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("signal_every")));
  options = {};
  options.rank = -2;
  EXPECT_THAT(IbverbsTransport::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace rdmaflow::rdma::ibverbs
