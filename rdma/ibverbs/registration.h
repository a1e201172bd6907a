// File: registration.h
// -----------------------------------------------------------------------------
// Memory registration for the ibverbs transport: page-aligned allocations
// and caller memory registered with the device's protection domain
// (ibv_reg_mr), device memory through a dma-buf (ibv_reg_dmabuf_mr,
// GPUDirect RDMA), and the packed remote keys peers use for them. A region
// holds its registration, which holds the device context, so a region may
// outlive the transport.
#ifndef RDMAFLOW_RDMA_IBVERBS_REGISTRATION_H_
#define RDMAFLOW_RDMA_IBVERBS_REGISTRATION_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "rdma/ibverbs/ibverbs_internal.h"
#include "rdma/memory_region.h"
#include "rdma/transport.h"

namespace rdmaflow::rdma::ibverbs {

// Allocations are rounded up to whole pages.
inline constexpr size_t kPage = 4096;

// Thread-compatible; registrations it made may be released from any thread.
class Registrar {
 public:
  // `context` holds the protection domain; `rank` owns the regions.
  Registrar(std::shared_ptr<VerbsContext> context, int rank)
      : context_(std::move(context)), rank_(rank) {}

  const VerbsContext* context() const { return context_.get(); }

  // Zeroed, page-aligned memory of at least `bytes`, registered.
  // kInvalidArgument for 0 bytes; kResourceExhausted when the memory or the
  // locked-memory limit runs out (naming ulimit -l and where to raise it).
  absl::StatusOr<MemoryRegion> Allocate(size_t bytes);
  // The caller's memory, which must outlive the region.
  absl::StatusOr<MemoryRegion> Register(absl::Span<std::byte> memory);
  // Device memory exported as a dma-buf (DmaBufRegistrationError says why a
  // device refuses it).
  absl::StatusOr<MemoryRegion> RegisterDmaBuf(const DmaBufSpan& span);

 private:
  // Registers `bytes` at `data`; `owned` (freed with the region, or at once
  // on failure) is what Allocate() allocated, null for caller memory.
  absl::StatusOr<MemoryRegion> RegisterMemory(void* data, size_t bytes,
                                              void* owned);

  std::shared_ptr<VerbsContext> context_;
  int rank_;
};

}  // namespace rdmaflow::rdma::ibverbs

#endif  // RDMAFLOW_RDMA_IBVERBS_REGISTRATION_H_
