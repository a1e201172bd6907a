// File: backend_options.h
// -----------------------------------------------------------------------------
// BackendOptions: how the rdmaflow c10d backend sets itself up. From the
// environment, so `init_process_group("rdmaflow")` needs no code change:
//   RDMAFLOW_TRANSPORT         ucx (default) | ibverbs
//   RDMAFLOW_TRANSPORT_PARAMS  backend settings, key=value,... (e.g. tls=shm)
//   RDMAFLOW_STAGING_MB        staging for all-reduces of unregistered
//                              tensors (default 32; larger ones go in pieces)
//   RDMAFLOW_REGISTERED_MB     pool for registered tensors (default 64)
//   RDMAFLOW_INLINE_KB         asynchronous all-reduces and broadcasts
//                              of up to this many KiB run on the calling
//                              thread when the engine is idle, as
//                              synchronous calls always do (default 0:
//                              off; see docs/torch.md before turning it on)
//   RDMAFLOW_WAIT              how waits idle: adaptive (default), spin,
//                              yield, or adaptive:spin=N,yield_us=N,sleep_us=N
//                              (onesided/progress/wait_policy.h)
//   RDMAFLOW_DIRECT            auto (default): same-host ranks all-reduce by
//                              reading each other's memory where the
//                              transport maps it; off: the ring only
//                              (collectives/allreduce_group.h)
//   RDMAFLOW_CMA               auto (default): same-host ranks read each
//                              other's ordinary tensors with process_vm_readv
//                              (one copy, no staging) where every rank can;
//                              off: ordinary tensors are staged
//   RDMAFLOW_CMA_MIN_KB        ordinary tensors from this size on take
//                              those reads (default 4096); smaller ones are
//                              staged: the kernel's copy runs at about 0.75x
//                              memcpy, which pays off only where staging
//                              (a copy more) costs more (docs/torch.md)
//   RDMAFLOW_SHARED_TENSORS    off (default) | on: CPU tensors allocated
//                              afterwards of at least
//                              RDMAFLOW_SHARED_TENSORS_MIN_KB (default
//                              1024) lie in shared memory, which same-host
//                              peers map and read in place: no staging, no
//                              system call per read (torch_backend/
//                              shared_tensor_allocator.h; they are shared
//                              with children forked later)
//   RDMAFLOW_DEVICE_MB         the device all-reduce's region in device
//                              memory (default 64; 0: device tensors are
//                              all-reduced through host memory too)
//   RDMAFLOW_DEVICE_POOL_MB    device memory beside that region where the
//                              DDP hook moves gradient buckets, reduced
//                              there in place (default 64; 0: none)
//   RDMAFLOW_DEVICE_P2P        auto (default): sends and receives of CUDA
//                              tensors between ranks of one host go device
//                              to device (torch_backend/device_p2p.h)
//                              where every rank says auto; off: through
//                              host memory
//   RDMAFLOW_DEVICE            cuda (default): CUDA tensors go through
//                              torch's current device at creation; none:
//                              CPU tensors only (no CUDA context); fake:
//                              the fake device's tensors (tests without a
//                              GPU: torch_backend/tensor_device.h)
//   PYTORCH_CUDA_ALLOC_CONF, PYTORCH_ALLOC_CONF: torch's; backend:
//                              cudaMallocAsync there keeps CUDA tensors out
//                              of the device pool
//   LOCAL_RANK (set by torchrun): warned of where the current CUDA
//                              device at creation is not that one
//   TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT (set by torchrun), or
//   RDMAFLOW_RUN_ID: scope the group's store keys (rdma/torch/run_scope.h)
#ifndef RDMAFLOW_TORCH_BACKEND_BACKEND_OPTIONS_H_
#define RDMAFLOW_TORCH_BACKEND_BACKEND_OPTIONS_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/allreduce_group.h"
#include "onesided/progress/wait_policy.h"

namespace rdmaflow::torch_backend {

struct BackendOptions {
  std::string transport = "ucx";
  std::string transport_params;
  // The all-reduce data region: staging first, then the registered pool.
  size_t staging_bytes = size_t{32} << 20;
  size_t registered_bytes = size_t{64} << 20;
  // Ring all-reduce pieces and slots per link.
  size_t chunk_bytes = size_t{256} << 10;
  int ring_slots = 32;  // at most (collectives/ring_allreduce.h)
  // Direct access among same-host ranks (collectives/allreduce_group.h).
  collectives::DirectAccess direct = collectives::DirectAccess::kAuto;
  // Same-host ranks read each other's ordinary tensors of at least
  // cma_min_bytes with process_vm_readv instead of staging them
  // (collectives/peer_process.h), where every rank can.
  bool cma = true;
  size_t cma_min_bytes = size_t{4} << 20;
  // Torch allocates CPU tensors of at least shared_tensors_min_bytes in
  // shared segments (torch_backend/shared_tensor_allocator.h), installed
  // when the group is created.
  bool shared_tensors = false;
  size_t shared_tensors_min_bytes = size_t{1} << 20;
  // Messenger (broadcast, all-gather, reduce-scatter, send/recv) pieces and
  // slots per ordered pair.
  size_t message_slot_bytes = size_t{256} << 10;
  int message_slots = 8;
  // An asynchronous all-reduce or broadcast whose tensors total at most
  // this many bytes runs on the calling thread, with no hand-off to the
  // engine thread and back, when the engine is idle and this is the
  // process's only rdmaflow group (Engine::TryRunInline; a synchronous call
  // does so whatever this says). Off (0) by default: such a call returns
  // only once its peers have joined it, async_op=True included.
  size_t inline_bytes = 0;
  // Set-up and every operation: an error after this long without progress.
  absl::Duration timeout = absl::Minutes(30);
  // How the ring, the messenger and the engine thread idle between rounds
  // that move nothing.
  onesided::WaitPolicy wait = onesided::WaitPolicy::Adaptive();
  // Which device tensors the group moves: "cuda", "none" or "fake"
  // (TensorDevice).
  std::string device = "cuda";
  // The device all-reduce's region (DeviceAllReduce); 0: none.
  size_t device_bytes = size_t{64} << 20;
  // The device pool beside it (DeviceAllReduce::MoveIn); 0: none.
  size_t device_pool_bytes = size_t{64} << 20;
  // Torch's CUDA allocator is cudaMallocAsync (PYTORCH_CUDA_ALLOC_CONF, or
  // PYTORCH_ALLOC_CONF where that is unset, as torch reads them, says
  // backend:cudaMallocAsync), whose bookkeeping of
  // streams fails on memory it did not allocate: no CUDA tensor moves into
  // the device pool then (DeviceAllReduce::MoveIn).
  bool torch_cuda_malloc_async = false;
  // Sends and receives of device tensors device to device (DeviceP2p),
  // where every rank of one host has it on.
  bool device_p2p = true;
  // LOCAL_RANK as torchrun sets it (-1: unset), for the warning below.
  int local_rank = -1;
  // Prefix of the group's keys in its store: keeps the keys of an earlier
  // run, or of an attempt before an elastic restart, out of sight.
  std::string store_scope = "run/none/attempt/0";

  // Defaults overridden by the RDMAFLOW_* variables above. kInvalidArgument
  // naming a malformed variable.
  static absl::StatusOr<BackendOptions> FromEnvironment(absl::Duration timeout);
};

// What to tell a rank that is about to take CUDA device `current` of
// `count` while torchrun's LOCAL_RANK names another device that exists (a
// script that calls torch.cuda.set_device after init_process_group: the
// group would take cuda:`current` and refuse the rank's tensors); empty
// where nothing is amiss (one device, LOCAL_RANK unset, or its device).
std::string DeviceChoiceWarning(const BackendOptions& options, int current, int count);

}  // namespace rdmaflow::torch_backend

#endif  // RDMAFLOW_TORCH_BACKEND_BACKEND_OPTIONS_H_
