// File: device_allreduce.cc
#include "collectives/device_allreduce.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace rdmaflow::collectives {

absl::StatusOr<std::unique_ptr<DeviceAllReduce>> DeviceAllReduce::Create(
    rdma::device_path::DeviceTransport& transport, rdma::Store& store, const std::string& ns,
    std::vector<int> members, const DeviceAllReduceOptions& options) {
  if (options.capacity_bytes == 0 || options.one_shot_max_bytes > options.capacity_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device all-reduce '", options.name, "': needs a capacity above 0 and a one-shot "
        "limit within it (got ", options.capacity_bytes, " and ", options.one_shot_max_bytes,
        ")"));
  }
  std::unique_ptr<DeviceAllReduce> out(new DeviceAllReduce());
  ASSIGN_OR_RETURN(out->data_, transport.AllocateDevice(options.capacity_bytes));
  ASSIGN_OR_RETURN(out->mover_, DeviceDataMover::Create(transport));
  HostAllReduceOptions host;
  host.name = options.name;
  host.one_shot_max_bytes = options.one_shot_max_bytes;
  host.chunk_bytes = options.chunk_bytes;
  host.timeout = options.timeout;
  host.loop = options.loop;
  host.mover = out->mover_.get();
  ASSIGN_OR_RETURN(out->allreduce_, HostAllReduce::Create(transport, store, ns,
                                                          std::move(members), out->data_, host));
  return out;
}

}  // namespace rdmaflow::collectives
