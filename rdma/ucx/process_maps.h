// File: process_maps.h
// -----------------------------------------------------------------------------
// Whether a range of this process's address space lies inside one of its
// shared mappings (/proc/self/maps, `s` in the permissions). ucp_rkey_ptr
// maps a same-host peer's shared memory by adding an offset to the address
// the peer announced, without checking it against the segment it attached;
// an address or length a peer forged would then send copies past it. So
// before the UCX backend copies through such a mapping it checks the whole
// range once per region extent: never our heap, stack or code, never past
// the end of a mapping. (What it cannot tell is one shared mapping from
// another: UCX's own shared-memory put copies to the same place with no
// check at all. docs/security.md.)
#ifndef RDMAFLOW_RDMA_UCX_PROCESS_MAPS_H_
#define RDMAFLOW_RDMA_UCX_PROCESS_MAPS_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace rdmaflow::rdma::ucx {

// True when [address, address + bytes) is inside one line of `maps` (the
// text of /proc/<pid>/maps) whose permissions say shared. False for an
// empty range, one that wraps the address space, or an unreadable text.
bool InsideOneSharedMapping(absl::string_view maps, uintptr_t address, size_t bytes);

// The same against this process's /proc/self/maps, read now.
bool InsideOwnSharedMapping(const void* address, size_t bytes);

}  // namespace rdmaflow::rdma::ucx

#endif  // RDMAFLOW_RDMA_UCX_PROCESS_MAPS_H_
