// File: gpudirect_probe.cc
#include "rdma/device/gpudirect_probe.h"

#include <cstdint>

#include "common/status_macros.h"

namespace rdmaflow::rdma::device_path {
namespace {

// Whole pages of any size a NIC maps (CUDA hands out 2 MiB-aligned
// allocations of this size).
constexpr size_t kProbeBytes = size_t{2} << 20;

}  // namespace

absl::Status ProbeGpuDirect(Transport& host, device::DeviceRuntime& runtime) {
  // A backend that registers no dma-buf says so to an empty span, before
  // any device memory is taken.
  absl::Status backend = host.RegisterDmaBuf(DmaBufSpan{}).status();
  if (absl::IsUnimplemented(backend)) return backend;
  ASSIGN_OR_RETURN(device::DeviceMemory memory, runtime.Allocate(kProbeBytes));
  ASSIGN_OR_RETURN(device::DmaBuf exported, runtime.ExportDmaBuf(memory.data(), kProbeBytes));
  DmaBufSpan span;
  span.fd = exported.fd.get();
  span.offset = exported.offset;
  span.bytes = exported.size;
  span.address = reinterpret_cast<uintptr_t>(memory.data());
  // Deregistered (the region goes first), then the export closed, then the
  // memory freed.
  ASSIGN_OR_RETURN(MemoryRegion region, host.RegisterDmaBuf(span));
  return absl::OkStatus();
}

}  // namespace rdmaflow::rdma::device_path
