// File: process_maps.h
// -----------------------------------------------------------------------------
// Whether a range of this process's address space lies inside one of its
// mappings (/proc/self/maps). ucp_rkey_ptr maps a same-host peer's shared
// memory by adding an offset to the address the peer announced, without
// checking it against the segment it attached; an address or length a
// peer forged would then send our copies past the mapping. So before the
// UCX backend copies through such a mapping it checks the whole range once
// per region (docs/rdma.md, "Flag notifications over UCX shared memory").
#ifndef RDMAFLOW_RDMA_UCX_PROCESS_MAPS_H_
#define RDMAFLOW_RDMA_UCX_PROCESS_MAPS_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace rdmaflow::rdma::ucx {

// True when [address, address + bytes) is inside one line of `maps` (the
// text of /proc/<pid>/maps). False for an empty range, one that wraps the
// address space, or an unreadable text.
bool InsideOneMapping(absl::string_view maps, uintptr_t address, size_t bytes);

// The same against this process's /proc/self/maps, read now.
bool InsideOwnMapping(const void* address, size_t bytes);

}  // namespace rdmaflow::rdma::ucx

#endif  // RDMAFLOW_RDMA_UCX_PROCESS_MAPS_H_
