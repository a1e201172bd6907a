// File: close_mappings.cc
#include "rdma/device/close_mappings.h"

#include <algorithm>

#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "rdma/rendezvous.h"

namespace rdmaflow::rdma::device_path {

absl::Status CloseMappingsTogether(DeviceTransport& transport, Store& store, absl::string_view ns,
                                   int world_size, absl::Time deadline) {
  RETURN_IF_ERROR(transport.CloseMappings(deadline));
  return Barrier(store, ns, "device/mappings-closed", world_size,
                 std::max(deadline - absl::Now(), absl::ZeroDuration()));
}

}  // namespace rdmaflow::rdma::device_path
