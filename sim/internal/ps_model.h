// File: ps_model.h
// -----------------------------------------------------------------------------
// What the parameter server's two models share (ps_model.cc, without
// overlap; ps_overlap_model.cc, overlap=on). Internal to sim/.
#ifndef RDMAFLOW_SIM_INTERNAL_PS_MODEL_H_
#define RDMAFLOW_SIM_INTERNAL_PS_MODEL_H_

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"
#include "sim/internal/job.h"
#include "strategies/ps/sync_policy.h"

namespace rdmaflow::sim::internal {

// A versioned read's header and a copy's stamp (onesided/versioned_buffer.h).
constexpr double kHeaderBytes = 64;
constexpr double kStampBytes = 8;

// Each server's shard: the layers (indices into Costs::layer_param_bytes)
// whose parameters it holds, in model order; whole tensors, largest first
// onto the emptiest server (strategies/ps/sharding.h).
std::vector<std::vector<size_t>> PsShardLayers(const Costs& costs, int servers);

// overlap=on: runs the loop to the end; the samples the job trains per
// step. `slice_bytes` 0 cuts each shard as the strategy's slice_bytes=auto
// does (strategies/ps/slices.h). `prefetch` (bsp only): the next step's
// slices are pulled during this one, as the strategy's prefetch=on does.
absl::StatusOr<double> RunParameterServerOverlapped(Job& job, int servers,
                                                    const strategies::ps::SyncPolicy& policy,
                                                    double slice_bytes, bool prefetch);

}  // namespace rdmaflow::sim::internal

#endif  // RDMAFLOW_SIM_INTERNAL_PS_MODEL_H_
