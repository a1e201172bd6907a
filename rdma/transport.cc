// File: transport.cc
#include "rdma/transport.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace rdmaflow::rdma {

bool Transport::WaitForActivity(absl::Duration timeout) {
  if (timeout > absl::ZeroDuration()) absl::SleepFor(timeout);
  return false;
}

absl::StatusOr<MemoryRegion> Transport::AllocateDevice(size_t bytes) {
  return absl::UnimplementedError(absl::StrCat(
      "the ", capabilities().backend, " transport has no device memory (asked for ", bytes,
      " bytes): device regions need the device transport (rdma/device) over it"));
}

absl::StatusOr<MemoryRegion> Transport::RegisterDmaBuf(const DmaBufSpan&) {
  return absl::UnimplementedError(absl::StrCat(
      "the ", capabilities().backend,
      " transport does not register device memory (GPUDirect RDMA needs the ibverbs "
      "backend on a NIC whose driver takes dma-bufs); device memory goes staged "
      "through host memory instead"));
}

}  // namespace rdmaflow::rdma
