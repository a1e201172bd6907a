// File: close_mappings.h
// -----------------------------------------------------------------------------
// The collective end of device memory shared through IPC: CUDA leaves
// freeing memory another process still has open undefined, so every rank
// closes its mappings of the peers' allocations, and none frees its own
// before all have.
//
//   RETURN_IF_ERROR(group->Shutdown());  // nobody reads a peer's memory now
//   RETURN_IF_ERROR(CloseMappingsTogether(*transport, store, ns, world, deadline));
//   // ... then the regions and the transport go.
#ifndef RDMAFLOW_RDMA_DEVICE_CLOSE_MAPPINGS_H_
#define RDMAFLOW_RDMA_DEVICE_CLOSE_MAPPINGS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rdma/device/device_transport.h"
#include "rdma/store.h"

namespace rdmaflow::rdma::device_path {

// Closes `transport`'s mappings (DeviceTransport::CloseMappings, whose
// errors it returns, closing nothing), then waits at the store barrier
// "device/mappings-closed" of `ns` until all `world_size` ranks have, by
// `deadline` (the barrier's errors). Once per `ns`: a store barrier counts
// on, so a second one of the same name would not wait.
absl::Status CloseMappingsTogether(DeviceTransport& transport, Store& store, absl::string_view ns,
                                   int world_size, absl::Time deadline);

}  // namespace rdmaflow::rdma::device_path

#endif  // RDMAFLOW_RDMA_DEVICE_CLOSE_MAPPINGS_H_
