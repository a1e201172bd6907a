#include "rdma/transport_registry.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/builtin_transports.h"

namespace rdmaflow::rdma {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(TransportRegistryTest, BuiltinsAreListedByPriority) {
  TransportRegistry registry;
  ASSERT_OK(RegisterBuiltinTransports(registry));
  EXPECT_THAT(registry.Names(), ElementsAre("ucx", "ibverbs", "loopback"));
  EXPECT_THAT(RegisterBuiltinTransports(registry),
              StatusIs(absl::StatusCode::kAlreadyExists));
}

TEST(TransportRegistryTest, UnknownNameListsTheValidOnes) {
  TransportRegistry registry;
  ASSERT_OK(RegisterBuiltinTransports(registry));
  EXPECT_THAT(registry.Create("verbs", {}),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("registered: ucx, ibverbs, loopback")));
}

TEST(TransportRegistryTest, UnknownParameterListsTheAcceptedOnes) {
  TransportRegistry registry;
  ASSERT_OK(RegisterBuiltinTransports(registry));
  TransportConfig config;
  config.params["tsl"] = "shm";
  EXPECT_THAT(registry.Create("ucx", config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tls, net_devices, keepalive_ms, max_outstanding, notify, tcp_tx_seg_kb, streaming_copy_kb")));
  config.params = {{"notify", "imm"}};
  EXPECT_THAT(registry.Create("ucx", config),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("flag")));
  config.params = {{"max_outstanding", "many"}};
  EXPECT_THAT(registry.Create("loopback", config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("integer")));
}

TEST(TransportRegistryTest, CreatesAWorkingTransport) {
  TransportRegistry registry;
  ASSERT_OK(RegisterBuiltinTransports(registry));
  TransportConfig config;
  config.rank = 5;
  config.params["tls"] = "shm";
  ASSERT_OK_AND_ASSIGN(auto transport, registry.Create("ucx", config));
  EXPECT_EQ(transport->rank(), 5);
  EXPECT_EQ(transport->capabilities().backend, "ucx");
  ASSERT_OK_AND_ASSIGN(MemoryRegion region, transport->Allocate(100));
  EXPECT_EQ(region.size(), 100u);
  EXPECT_EQ(region.data()[99], std::byte{0});
}

TEST(TransportRegistryTest, ProbesSayWhatEachBackendFinds) {
  TransportRegistry registry;
  ASSERT_OK(RegisterBuiltinTransports(registry));
  // UCX always has its self and shared-memory transports on Linux.
  ASSERT_OK_AND_ASSIGN(TransportProbeReport ucx, registry.Probe("ucx"));
  EXPECT_TRUE(ucx.usable);
  EXPECT_THAT(ucx.found, ::testing::Contains(HasSubstr("UCX 1.")));
  EXPECT_THAT(ucx.found, ::testing::Contains(HasSubstr("transport self: ")));
  // Without an RDMA device, ibverbs is not usable and says what to do.
  ASSERT_OK_AND_ASSIGN(TransportProbeReport ibverbs, registry.Probe("ibverbs"));
  EXPECT_TRUE(ibverbs.usable || !ibverbs.advice.empty());
  EXPECT_THAT(registry.Probe("verbs"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("registered: ucx")));
  // A backend registered without a probe.
  ASSERT_OK(registry.Register("plain", 1, [](const TransportConfig&) {
    return absl::StatusOr<std::unique_ptr<Transport>>(
        absl::UnimplementedError("no transport"));
  }));
  ASSERT_OK_AND_ASSIGN(TransportProbeReport plain, registry.Probe("plain"));
  EXPECT_FALSE(plain.usable);
  EXPECT_THAT(plain.found, ElementsAre("(this backend has no probe)"));
}

TEST(ParseTransportParamsTest, ParsesAndRejects) {
  ASSERT_OK_AND_ASSIGN(auto params, ParseTransportParams("tls=shm,a=b=c"));
  EXPECT_EQ(params["tls"], "shm");
  EXPECT_EQ(params["a"], "b=c");
  EXPECT_THAT(ParseTransportParams("tls"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("key=value")));
  // A repeated key is refused, not silently overridden by the later one.
  EXPECT_THAT(ParseTransportParams("tls=shm,max_outstanding=8,tls=tcp"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'tls' is given twice ('shm' and 'tcp')")));
}

}  // namespace
}  // namespace rdmaflow::rdma
