// File: device_allreduce.h
// -----------------------------------------------------------------------------
// allreduce_bench --device=cuda|fake: AllReduceGroup on device memory
// (AllReduceGroupOptions::device, collectives/allreduce_group.h) on one
// rank, measured as the host implementations are (a checked call, then timed
// calls) and reported in the same rows: impl "rdmaflow-device" (every rank on
// one host: the same-host paths on the device, algorithm "device-one-shot"
// or "device-scatter-gather"), or "rdmaflow-device-ring" (direct access off:
// the ring on pinned host copies of the range, algorithm "device-ring").
//
// Its bound: every rank shares one device's memory here (the H200 machine
// has one GPU), so a call cannot beat the device's copy bandwidth spread
// over the bytes all ranks move. A call of S bytes on n ranks moves, per
// rank, reads plus writes of
//   one shot:        (n + 1) S to reduce into scratch, 2 S to copy it back;
//   scatter-gather:  (n + 1) S / n to reduce its segment, 2 (n - 1) S / n
//                    to copy the others' segments;
// so the row's reduce_bound_gbps is copy_gbps * S / (n * moved), where
// copy_gbps counts a copy's read and write (2 bytes per byte copied). The
// ring's bound is the host's and the bus's, not the device's: none given.
#ifndef RDMAFLOW_BENCH_DEVICE_ALLREDUCE_H_
#define RDMAFLOW_BENCH_DEVICE_ALLREDUCE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/allreduce_sweep.h"
#include "collectives/allreduce_group.h"
#include "device/device_runtime.h"
#include "onesided/progress/progress_loop.h"
#include "rdma/device/device_transport.h"
#include "rdma/store.h"
#include "rdma/transport.h"

namespace rdmaflow::bench {

struct DeviceAllReduceBenchOptions {
  int rank = 0;
  int world = 0;
  // The largest call, bytes (the device data region).
  int64_t capacity_bytes = 0;
  int64_t one_shot_max_bytes = 256 << 10;
  // A fence per chunk (collectives/host_allreduce.h): large on a device.
  int64_t chunk_bytes = int64_t{64} << 20;
  absl::Duration timeout = absl::Seconds(120);
  // The ring on host copies (impl rdmaflow-device-ring) instead of the
  // same-host paths.
  bool ring = false;
  // The ring's bytes per pipelined piece.
  int64_t ring_chunk_bytes = 256 << 10;
};

class DeviceAllReduceBench {
 public:
  // Over `host` (the rank's own host transport, wrapped in a DeviceTransport)
  // and `runtime`; meets the other ranks through `store`.
  static absl::StatusOr<std::unique_ptr<DeviceAllReduceBench>> Create(
      std::unique_ptr<rdma::Transport> host, std::unique_ptr<device::DeviceRuntime> runtime,
      rdma::Store& store, const DeviceAllReduceBenchOptions& options);
  ~DeviceAllReduceBench();

  // "cuda:0 (NVIDIA H200, sm_90)".
  std::string device_name() const { return runtime_->name(); }
  // "rdmaflow-device" or "rdmaflow-device-ring".
  std::string impl() const;
  // A copy between two device buffers of `bytes` (at most half the
  // capacity), GB/s counting its read and its write. Collective-free: call
  // it on one rank while the others wait.
  absl::StatusOr<double> CopyGbps(int64_t bytes, int iterations);

  // One call of `bytes` of float32 (every element: rank + 1) checked against
  // the exact sum, then `iterations` timed calls on zeros. Collective.
  // `copy_gbps` > 0: the row's bound (see above).
  absl::StatusOr<AllReduceRow> Measure(int64_t bytes, int iterations, double copy_gbps);

  // The collective's closing barrier.
  absl::Status Shutdown();

 private:
  DeviceAllReduceBench() = default;

  DeviceAllReduceBenchOptions options_;
  rdma::Store* store_ = nullptr;
  // In teardown order, last first: the runtime outlives all its memory.
  std::unique_ptr<device::DeviceRuntime> runtime_;
  std::unique_ptr<rdma::device_path::DeviceTransport> transport_;
  std::unique_ptr<onesided::ProgressLoop> loop_;
  std::unique_ptr<device::Stream> stream_;
  std::unique_ptr<device::Event> done_;
  std::unique_ptr<collectives::AllReduceGroup> group_;
};

}  // namespace rdmaflow::bench

#endif  // RDMAFLOW_BENCH_DEVICE_ALLREDUCE_H_
