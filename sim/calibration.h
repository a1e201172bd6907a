// File: calibration.h
// -----------------------------------------------------------------------------
// From this machine's measurements to the simulator's Calibration:
//   - a link from the ping-pong (bench/transport_pingpong --json): one-way
//     latency from the smallest write's median, bandwidth from the largest
//     write's average bandwidth, the per-message cost from the
//     smallest write's message rate less its bytes' time;
//   - the host's copy and reduce bandwidths from the collectives' bench
//     (bench/allreduce_bench --json), else the copy from the ping-pong's
//     memcpy column and the reduce as half of it;
//     whether its one-sided operations are emulated (UCX over TCP);
//   - model profiles from rdmaflow_profile --json, and the time-sharing
//     slowdown from copies of one profiled at once, k ranks a core.
// `rdmaflow calibrate` (cli/calibrate_command.h) drives it;
// tools/calibrate_sim.sh runs the measurements.
#ifndef RDMAFLOW_SIM_CALIBRATION_H_
#define RDMAFLOW_SIM_CALIBRATION_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "results/results.pb.h"
#include "sim/sim.pb.h"

namespace rdmaflow::sim {

// kInvalidArgument if the report has no write rows or a row is not a
// finite positive measurement (naming the file's `source`).
absl::StatusOr<LinkProfile> LinkFromPingPong(const std::string& name,
                                             const results::BenchmarkReport& report,
                                             const std::string& source);

// The ring's bus bandwidth from bench/allreduce_bench --json run across
// hosts that share cores: rdmaflow's ring row of the largest size (its
// busbw, GB/s, and its ranks). kInvalidArgument naming `source` when it has
// no such row or the figure is not finite and positive.
absl::StatusOr<std::pair<double, int>> SharedRingFromAllReduce(
    const results::BenchmarkReport& report, const std::string& source);

// What the owner's socket carries on alone (LinkProfile.unattended_bytes)
// from bench/transport_pingpong --owner_busy_ms --json: the largest read
// row timed with its owner busy. A read of B bytes that takes t idle and
// t_busy with the owner computing T from just after it began moved
// B x (1 - (t_busy - T) / t) while the owner computed; at most B (a read
// that was not delayed at all moved everything: B is then a lower bound),
// and at least kMinUnattendedBytes (scenario.h).
// kInvalidArgument naming `source` for no such row, a read under
// kMinUnattendedBytes, or figures that are not finite and positive.
absl::StatusOr<double> UnattendedBytesFromPingPong(const results::BenchmarkReport& report,
                                                   const std::string& source);

// The memcpy column of the largest write, GB/s (0 when absent).
double MemcpyFromPingPong(const results::BenchmarkReport& report);

// The model's profile; kNotFound listing the models the calibration has.
absl::StatusOr<ModelProfile> FindModel(const Calibration& calibration,
                                       const std::string& name);

// The profile of a machine that computes `speedup` times as fast (an
// accelerator, say): every compute time divided by it, bytes unchanged.
// kInvalidArgument for a speedup outside [1e-3, 1e4] or not finite.
absl::StatusOr<ModelProfile> FasterCompute(const ModelProfile& model, double speedup);

// The time-sharing slowdown at `ranks_per_core` (> 1): `copies` are
// profiles of one model taken at once, that many ranks a core; `alone`, the
// same model profiled by itself. slowdown = the copies' mean whole-step time
// / (ranks_per_core x alone's), at least 1 (a noisy measurement below it
// means no slowdown). kInvalidArgument naming `source` for no copies,
// another model or batch, or a step time that is not positive and finite.
absl::StatusOr<TimeSharing> TimeSharingFromProfiles(double ranks_per_core,
                                                    const ModelProfile& alone,
                                                    const std::vector<ModelProfile>& copies,
                                                    const std::string& source);

}  // namespace rdmaflow::sim

#endif  // RDMAFLOW_SIM_CALIBRATION_H_
