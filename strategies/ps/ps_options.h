// File: ps_options.h
// -----------------------------------------------------------------------------
// The parameter server's settings, from StrategyOptions::params:
//   servers=N   ranks 0..N-1 serve, the rest are workers (default 1)
//   sync=MODE   bsp | asp | ssp:S | dssp:LOW:HIGH (sync_policy.h; default bsp)
//   pull=HOW    read: workers read parameters by one-sided READ from the
//               servers' versioned buffers (default; needs the rdma
//               communicator); send: servers send them, as an RPC parameter
//               server replies (any communicator)
//   copies=K    versions a server keeps of its shard for readers (default 3)
//   overlap=on  communication hidden behind compute (default off; needs
//               pull=read and no codec): each shard is cut into slices of
//               slice_bytes, a worker pushes each slice as soon as backward
//               has produced its gradients, the server applies a slice once
//               the sync mode lets it, and workers pull each slice of the
//               next step as soon as the server published it, while the
//               other slices are still being pushed (P3's slicing)
//   slice_bytes=N  the slices' size with overlap=on: a positive multiple
//               of 4, or auto (the default): 256 KiB, larger only where a
//               shard would otherwise be cut into more than 1024 slices
//               (slices.h, AutoSliceBytes)
//   prefetch=on with overlap=on, a worker pulls the next step's slices
//               during this step's backward and pushes, into a buffer of its
//               own that the next step takes, each as soon as it may go into
//               the next step: under bsp once every worker's gradients are
//               in (its values are final then), under the other modes once
//               it holds this worker's own and the next step is within the
//               bound (default on under bsp, off otherwise; off: they are
//               pulled when the next step begins; only with overlap=on)
#ifndef RDMAFLOW_STRATEGIES_PS_PS_OPTIONS_H_
#define RDMAFLOW_STRATEGIES_PS_PS_OPTIONS_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "strategies/ps/sync_policy.h"

namespace rdmaflow::strategies::ps {

// Value type.
struct PsOptions {
  int servers = 1;
  SyncPolicy sync;
  bool pull_by_read = true;
  int copies = 3;
  bool overlap = false;
  int64_t slice_bytes = 0;  // 0: auto
  bool prefetch = false;  // only with overlap=on; Parse's default: under bsp

  // kInvalidArgument naming the bad or unknown key and the known ones.
  static absl::StatusOr<PsOptions> Parse(
      const std::map<std::string, std::string>& params);
};

}  // namespace rdmaflow::strategies::ps

#endif  // RDMAFLOW_STRATEGIES_PS_PS_OPTIONS_H_
