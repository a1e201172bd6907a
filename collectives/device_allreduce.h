// File: device_allreduce.h
// -----------------------------------------------------------------------------
// DeviceAllReduce: the same-host all-reduce on device memory, ready to use:
// it owns a device data region of a DeviceTransport, the DeviceDataMover and
// the HostAllReduce that runs the protocol on them (docs/collectives.md,
// "Device memory"), in the order their lifetimes need. Callers lay their
// tensors in data() (device memory) and reduce ranges of it in place, or
// into a result buffer of their own.
//
//   DeviceAllReduceOptions options;
//   options.capacity_bytes = 256 << 20;
//   options.loop = &loop;  // a ProgressLoop over the device transport
//   ASSIGN_OR_RETURN(auto allreduce, DeviceAllReduce::Create(
//       *device_transport, store, "job", {0, 1}, options));
//   copy gradients to allreduce->data() on the device
//   RETURN_IF_ERROR(allreduce->AllReduce(0, n, DataType::kBFloat16));
//   RETURN_IF_ERROR(allreduce->Shutdown());
//
// Every member must be on this host (kUnimplemented otherwise, on every
// member alike); across hosts the staged path is there (rdma/device) but no
// collective uses it yet. Thread-compatible: the loop's thread.
#ifndef RDMAFLOW_COLLECTIVES_DEVICE_ALLREDUCE_H_
#define RDMAFLOW_COLLECTIVES_DEVICE_ALLREDUCE_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/device_data_mover.h"
#include "collectives/host_allreduce.h"
#include "collectives/reduce.h"
#include "onesided/progress/progress_loop.h"
#include "rdma/device/device_transport.h"
#include "rdma/memory_region.h"
#include "rdma/store.h"

namespace rdmaflow::collectives {

struct DeviceAllReduceOptions {
  // Names the collective in the store (unique per namespace).
  std::string name = "device-allreduce";
  // Bytes of the device data region (> 0).
  size_t capacity_bytes = 0;
  // Calls of at most this many bytes take the one-shot path.
  size_t one_shot_max_bytes = size_t{256} << 10;
  // The reduce-scatter's unit: each chunk is published once the device
  // has reduced it (a multiple of 64).
  size_t chunk_bytes = size_t{16} << 20;
  absl::Duration timeout = absl::Seconds(120);
  // A progress loop over the device transport; required, outlives this.
  onesided::ProgressLoop* loop = nullptr;
};

class DeviceAllReduce {
 public:
  // HostAllReduce::Create's errors; kInvalidArgument for a capacity of 0 or
  // a one-shot limit above it; the device's when it cannot allocate.
  static absl::StatusOr<std::unique_ptr<DeviceAllReduce>> Create(
      rdma::device_path::DeviceTransport& transport, rdma::Store& store, const std::string& ns,
      std::vector<int> members, const DeviceAllReduceOptions& options);

  // The data region: device memory of the transport's runtime.
  std::byte* data() const { return data_.data(); }
  size_t capacity() const { return data_.size(); }
  bool OneShot(size_t bytes) const { return allreduce_->OneShot(bytes); }
  const HostAllReduceStats& stats() const { return allreduce_->stats(); }
  const DataMover& mover() const { return *mover_; }

  // HostAllReduce::AllReduce on the data region (float32, float16,
  // bfloat16; sum or max). Returns once the result is in place (or in
  // `result`, device memory outside the region).
  absl::Status AllReduce(size_t offset, size_t count, DataType type,
                         ReduceOp op = ReduceOp::kSum, std::byte* result = nullptr) {
    return allreduce_->AllReduce(offset, count, type, op, 0, result);
  }
  // Collective: the closing barrier (HostAllReduce::Shutdown).
  absl::Status Shutdown(std::optional<absl::Duration> timeout = std::nullopt) {
    return allreduce_->Shutdown(timeout);
  }

 private:
  DeviceAllReduce() = default;

  // Torn down last to first: the protocol, its mover, then the memory.
  rdma::MemoryRegion data_;
  std::unique_ptr<DeviceDataMover> mover_;
  std::unique_ptr<HostAllReduce> allreduce_;
};

}  // namespace rdmaflow::collectives

#endif  // RDMAFLOW_COLLECTIVES_DEVICE_ALLREDUCE_H_
