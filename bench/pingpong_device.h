// File: pingpong_device.h
// -----------------------------------------------------------------------------
// The ping-pong over device memory (transport_pingpong --memory=device): the
// rank's transport wrapped in a DeviceTransport (rdma/device), whose device
// regions the ping-pong writes from and into, and whose `memcpy` column is
// a copy between two buffers of the same device on one stream (the bound of
// a same-host device transfer; on the fake device, a host copy by its copy
// thread).
#ifndef RDMAFLOW_BENCH_PINGPONG_DEVICE_H_
#define RDMAFLOW_BENCH_PINGPONG_DEVICE_H_

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/pingpong.h"
#include "device/device_runtime.h"
#include "rdma/device/device_transport.h"
#include "rdma/memory_region.h"
#include "rdma/store.h"
#include "rdma/transport.h"

namespace rdmaflow::bench {

class DevicePingPong {
 public:
  // `max_bytes`: the largest size measured (the reference's buffers).
  // `options`: the device transport's (e.g. a host identity of its own, so
  // that every transfer is staged).
  static absl::StatusOr<std::unique_ptr<DevicePingPong>> Create(
      std::unique_ptr<rdma::Transport> host, std::unique_ptr<device::DeviceRuntime> runtime,
      size_t max_bytes, const rdma::device_path::DeviceTransportOptions& options = {});

  rdma::Transport& transport() { return *transport_; }
  device::DeviceRuntime& runtime() { return *runtime_; }

  // Points `options`' allocate, fill and reference at this object, which
  // must outlive the run.
  void Apply(PingPongOptions& options);

  // After the run, on both ranks: each closes its mappings of the other's
  // regions, and neither frees its own (this object's end) before both
  // have (rdma/device/close_mappings.h).
  absl::Status CloseMappings(rdma::Store& store, absl::Time deadline);

 private:
  DevicePingPong() = default;
  absl::Status Fill(rdma::MemoryRegion& region, unsigned char value);
  absl::StatusOr<double> CopyMbps(size_t bytes, int iterations);

  // Declared first: the transport and the buffers go before their runtime.
  std::unique_ptr<device::DeviceRuntime> runtime_;
  std::unique_ptr<rdma::device_path::DeviceTransport> transport_;
  std::unique_ptr<device::Stream> stream_;
  std::unique_ptr<device::Event> done_;
  size_t max_bytes_ = 0;
  // The reference copy's buffers (rank 0 only), allocated at its first call.
  device::DeviceMemory from_;
  device::DeviceMemory to_;
};

}  // namespace rdmaflow::bench

#endif  // RDMAFLOW_BENCH_PINGPONG_DEVICE_H_
