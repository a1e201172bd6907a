// ProbeGpuDirect over the fake device: refused by a backend that registers
// no dma-buf (the loopback) and by a device that cannot give the memory,
// and passed by a host transport that registers the dma-buf, which must be
// the probe's device memory.
#include "rdma/device/gpudirect_probe.h"

#include <sys/mman.h>

#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "device/fake/fake_device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/device/device_transport.h"
#include "rdma/loopback/loopback_fabric.h"
#include "rdma/loopback/loopback_transport.h"
#include "rdma/testing/transport_wrapper.h"

namespace rdmaflow::rdma::device_path {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::unique_ptr<Transport> Loopback() {
  loopback::LoopbackTransportOptions options;
  options.rank = 0;
  options.fabric = loopback::LoopbackFabric::Create();
  absl::StatusOr<std::unique_ptr<loopback::LoopbackTransport>> transport =
      loopback::LoopbackTransport::Create(options);
  EXPECT_THAT(transport.status(), ::rdmaflow::testing::IsOk());
  return transport.ok() ? std::unique_ptr<Transport>(*std::move(transport)) : nullptr;
}

std::unique_ptr<device::FakeDevice> Fake(size_t capacity = size_t{1} << 30) {
  device::FakeDeviceOptions options;
  options.capacity_bytes = capacity;
  absl::StatusOr<std::unique_ptr<device::FakeDevice>> device = device::FakeDevice::Create(options);
  EXPECT_THAT(device.status(), ::rdmaflow::testing::IsOk());
  return device.ok() ? *std::move(device) : nullptr;
}

// A host transport whose "NIC" takes dma-bufs: it maps what it is given,
// as a driver would, and checks that it reaches the device memory the span
// names (the fake device's memory is host memory).
class DmaBufTakingTransport final : public testing::TransportWrapper {
 public:
  explicit DmaBufTakingTransport(std::unique_ptr<Transport> inner)
      : TransportWrapper(*inner), owned_(std::move(inner)) {}

  absl::StatusOr<MemoryRegion> RegisterDmaBuf(const DmaBufSpan& span) override {
    if (span.fd < 0 || span.bytes == 0 || span.address == 0) {
      return absl::InvalidArgumentError("an empty dma-buf span");
    }
    spans.push_back(span);
    const size_t mapped = span.offset + span.bytes;
    void* view = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, span.fd, 0);
    if (view == MAP_FAILED) return absl::InternalError("the dma-buf does not map");
    constexpr char kMarker[] = "through the dma-buf";
    std::memcpy(static_cast<char*>(view) + span.offset + span.bytes - sizeof(kMarker), kMarker,
                sizeof(kMarker));
    reached_device_memory =
        std::memcmp(reinterpret_cast<const char*>(span.address) + span.bytes - sizeof(kMarker),
                    kMarker, sizeof(kMarker)) == 0;
    munmap(view, mapped);
    RemoteRegion descriptor;
    descriptor.backend = "dmabuf-test";
    descriptor.owner_rank = rank();
    descriptor.address = span.address;
    descriptor.length = span.bytes;
    descriptor.packed_key = "key";
    descriptor.memory_kind = device::MemoryKind::kDevice;
    return MemoryRegion(reinterpret_cast<std::byte*>(span.address), span.bytes,
                        std::move(descriptor), nullptr);
  }

  std::vector<DmaBufSpan> spans;
  bool reached_device_memory = false;

 private:
  std::unique_ptr<Transport> owned_;
};

TEST(GpuDirectProbeTest, ABackendWithoutDmaBufsIsRefusedByName) {
  std::unique_ptr<Transport> host = Loopback();
  std::unique_ptr<device::FakeDevice> device = Fake();
  ASSERT_NE(host, nullptr);
  ASSERT_NE(device, nullptr);
  EXPECT_THAT(ProbeGpuDirect(*host, *device),
              StatusIs(absl::StatusCode::kUnimplemented,
                       AllOf(HasSubstr("loopback"), HasSubstr("staged"))));
  // The device transport reports it, and passes registrations down.
  DeviceTransportOptions options;
  options.host_identity = "probe-host";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceTransport> transport,
                       DeviceTransport::Create(std::move(host), device.get(), options));
  EXPECT_THAT(transport->gpudirect(), StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_THAT(transport->capabilities().description,
              HasSubstr("GPUDirect RDMA: no (the loopback transport"));
  EXPECT_THAT(transport->RegisterDmaBuf(DmaBufSpan{}),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("loopback")));
}

TEST(GpuDirectProbeTest, AHostThatTakesDmaBufsIsGivenTheDeviceMemory) {
  std::unique_ptr<device::FakeDevice> device = Fake();
  ASSERT_NE(device, nullptr);
  auto taking = std::make_unique<DmaBufTakingTransport>(Loopback());
  DmaBufTakingTransport& host = *taking;
  EXPECT_THAT(ProbeGpuDirect(host, *device), ::rdmaflow::testing::IsOk());
  ASSERT_EQ(host.spans.size(), 1u);
  EXPECT_EQ(host.spans[0].bytes, size_t{2} << 20);
  EXPECT_TRUE(host.reached_device_memory)
      << "the dma-buf given to the host transport is not the probe's device memory";

  DeviceTransportOptions options;
  options.host_identity = "probe-host";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceTransport> transport,
                       DeviceTransport::Create(std::move(taking), device.get(), options));
  EXPECT_THAT(transport->gpudirect(), ::rdmaflow::testing::IsOk());
  EXPECT_THAT(transport->capabilities().description,
              HasSubstr("GPUDirect RDMA: available"));
}

TEST(GpuDirectProbeTest, ADeviceWithoutRoomFailsTheProbeWithItsReason) {
  std::unique_ptr<device::FakeDevice> device = Fake(/*capacity=*/1 << 20);
  ASSERT_NE(device, nullptr);
  DmaBufTakingTransport host(Loopback());
  EXPECT_THAT(ProbeGpuDirect(host, *device),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("fake device")));
  EXPECT_TRUE(host.spans.empty());
}

}  // namespace
}  // namespace rdmaflow::rdma::device_path
