// File: backend_stats.h
// -----------------------------------------------------------------------------
// BackendStats: what the rdmaflow c10d backend counts, so copies are visible
// (rdmaflow_torch.stats(group) in Python).
#ifndef RDMAFLOW_TORCH_BACKEND_BACKEND_STATS_H_
#define RDMAFLOW_TORCH_BACKEND_BACKEND_STATS_H_

#include <cstdint>

namespace rdmaflow::torch_backend {

struct BackendStats {
  int64_t allreduces = 0;
  int64_t zero_copy_allreduces = 0;  // registered tensors, reduced in place
  int64_t staged_bytes = 0;          // copied into the all-reduce staging area
  // Ordinary contiguous tensors all-reduced in place, the peers reading
  // them out of this process with process_vm_readv (no staging), and their
  // bytes.
  int64_t single_copy_allreduces = 0;
  int64_t single_copy_bytes = 0;
  // 1 where every rank can read every other's memory that way (set up,
  // agreed by all), else 0.
  int64_t single_copy_reads = 0;
  // 1 where torch allocates large CPU tensors in shared segments
  // (RDMAFLOW_SHARED_TENSORS=on); our tensors that lay in one and were
  // reduced in place, and their bytes; the peers' segments this rank
  // mapped, its reads of them, and the published segments it could not map
  // (read with process_vm_readv instead).
  int64_t shared_tensors = 0;
  int64_t shared_tensor_allreduces = 0;
  int64_t shared_tensor_bytes = 0;
  int64_t peer_segments_mapped = 0;
  int64_t peer_segment_reads = 0;
  int64_t peer_segment_fallbacks = 0;
  int64_t noncontiguous_copies = 0;  // tensors copied to be contiguous
  int64_t coalesced_bytes = 0;       // copied to lay a coalesced call's tensors end to
                                     // end, and back
  int64_t moved_to_registered = 0;   // storages moved into the registered pool
  int64_t moved_bytes = 0;           // their bytes
  int64_t moves_refused = 0;         // by RegisterRepeated (pool full, ...)
  int64_t inline_calls = 0;          // collectives run on the caller's thread
  int64_t teardown_failures = 0;     // collective teardown steps that failed
                                     // (shutdown; their memory kept, stderr)
  int64_t messages_sent = 0;         // by the Messenger
  int64_t message_bytes_staged = 0;  // payload the Messenger copied
  // What the group's links cost (onesided/links): endpoints connected to
  // the peers (both lanes), and liveness watches of them, in all.
  int64_t peer_endpoints = 0;
  int64_t peer_watches = 0;
  // Device tensors (CUDA, or the fake device's): calls that moved some,
  // and the bytes staged through host memory for them, both ways.
  int64_t device_calls = 0;
  int64_t device_staged_bytes = 0;
  // All-reduces of device tensors on the device (DeviceAllReduce).
  int64_t device_allreduces = 0;
  // The flat all-gathers and reduce-scatters (FSDP's) of device tensors on
  // the device, through the device all-reduce.
  int64_t device_allgathers = 0;
  int64_t device_reduce_scatters = 0;
  // Broadcasts of device tensors on the device (copied out of the root's
  // region on one host, else the root's values summed with the others'
  // -0.0), through the device all-reduce.
  int64_t device_broadcasts = 0;
  // Sends and receives of device tensors device to device (every rank on
  // one host): through CUDA IPC, or inline in the message where the
  // sender's memory does not export (its bytes in device_staged_bytes).
  int64_t device_p2p_ipc = 0;
  int64_t device_p2p_inline = 0;
  // This rank's tensors kept referenced because a peer still maps their
  // allocations (DeviceP2p's pins), as of the last send answered.
  int64_t device_p2p_pinned = 0;
  // All-to-alls of device tensors device to device (each part counted
  // above too).
  int64_t device_alltoalls = 0;
  // Gathers and scatters of device tensors device to device, the same way.
  int64_t device_gathers = 0;
  int64_t device_scatters = 0;
  // Storages moved into the device pool (counted in moved_to_registered
  // too), and the device all-reduces of tensors lying there, reduced in
  // place with no copy in or out.
  int64_t moved_to_device_pool = 0;
  int64_t device_pool_allreduces = 0;
  // The engine's time on the calls with device tensors, in microseconds,
  // summed: from the call to the engine's start of it (its earlier calls
  // ahead), waiting for the caller's stream to reach the call (and the
  // copies into host memory of a staged call), the collective itself, the
  // copies back. A call run on the caller's thread counts there too.
  int64_t device_queued_us = 0;
  int64_t device_wait_us = 0;
  int64_t device_run_us = 0;
  int64_t device_back_us = 0;
};

}  // namespace rdmaflow::torch_backend

#endif  // RDMAFLOW_TORCH_BACKEND_BACKEND_STATS_H_
