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
#ifndef RDMAFLOW_STRATEGIES_PS_PS_OPTIONS_H_
#define RDMAFLOW_STRATEGIES_PS_PS_OPTIONS_H_

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

  // kInvalidArgument naming the bad or unknown key and the known ones.
  static absl::StatusOr<PsOptions> Parse(
      const std::map<std::string, std::string>& params);
};

}  // namespace rdmaflow::strategies::ps

#endif  // RDMAFLOW_STRATEGIES_PS_PS_OPTIONS_H_
