// File: simulate.cc
#include "sim/simulate.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "sim/internal/job.h"

namespace rdmaflow::sim {
namespace {

bool Finite(double v, double low, double high) {
  return std::isfinite(v) && v >= low && v <= high;
}

absl::Status CheckLink(const LinkProfile& link, const char* role) {
  if (!(link.bandwidth_gbps() > 0 && std::isfinite(link.bandwidth_gbps()))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", role, " link '", link.name(), "' has bandwidth ",
        link.bandwidth_gbps(), " GB/s; it must be positive"));
  }
  if (!Finite(link.latency_us(), 0, 1e9) || !Finite(link.per_message_us(), 0, 1e9) ||
      !Finite(link.burst_bytes(), 0, 1e15) || !Finite(link.wait_cpu(), 0, 1) ||
      !Finite(link.moving_cpu(), 0, 1) || !Finite(link.unattended_bytes(), 0, 1e15) ||
      link.bandwidth_gbps() > 1e6) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", role, " link '", link.name(),
        "' has a latency, per-message cost, burst, bandwidth, wait CPU, moving CPU or unattended "
        "bytes out of range (negative, not finite, absurdly large, or a wait CPU or moving CPU "
        "above 1 core)"));
  }
  if (link.unattended_bytes() > 0 && link.unattended_bytes() < kMinUnattendedBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", role, " link '", link.name(), "' has unattended_bytes ",
        link.unattended_bytes(), "; a measured figure is at least ", kMinUnattendedBytes,
        " (a page), and 0 means not measured"));
  }
  return absl::OkStatus();
}

absl::Status CheckScenario(const Scenario& s) {
  if (s.ranks < 1 || s.ranks > (1 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ranks must be in 1..", 1 << 20, ", got ", s.ranks));
  }
  if (s.ranks_per_host < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ranks per host must be at least 1, got ", s.ranks_per_host));
  }
  if (s.shared_cores < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared cores must be >= 0 (0: per host), got ", s.shared_cores));
  }
  if (s.steps < 1) {
    return absl::InvalidArgumentError(absl::StrCat("steps must be at least 1, got ", s.steps));
  }
  if (!(s.slow_factor >= 1 && s.slow_factor <= 1000)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the slow factor must be in 1..1000, got ", s.slow_factor));
  }
  if (!(s.jitter >= 0 && s.jitter < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("jitter must be in [0, 1), got ", s.jitter));
  }
  if (s.slow_rank < -1 || s.slow_rank >= s.ranks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the slow rank must be -1 (none) or in 0..", s.ranks - 1, ", got ", s.slow_rank));
  }
  if (s.kill_rank != -1 && (s.kill_rank < 1 || s.kill_rank >= s.ranks)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the kill rank must be -1 (none) or in 1..", s.ranks - 1,
        " (rank 0 reports), got ", s.kill_rank));
  }
  if (s.kill_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the kill step must be >= 0, got ", s.kill_step));
  }
  if (s.host.cores() < 1 || s.host.cores() > (1 << 16) || s.shared_cores > (1 << 16)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the host profile has ", s.host.cores(), " cores (shared: ", s.shared_cores,
        "); it needs 1..65536"));
  }
  if (!(Finite(s.host.memcpy_gbps(), 1e-9, 1e6) && Finite(s.host.reduce_gbps(), 1e-9, 1e6) &&
        Finite(s.host.store_round_trip_us(), 0, 1e9) &&
        Finite(s.host.group_setup_ms(), 0, 1e9))) {
    return absl::InvalidArgumentError(
        "the host profile needs finite positive memcpy and reduce bandwidths and a "
        "store round trip and group set-up >= 0");
  }
  double last_ratio = 1;
  for (const TimeSharing& point : s.host.time_sharing()) {
    if (!(Finite(point.ranks_per_core(), 1, 1e6) && point.ranks_per_core() > last_ratio &&
          Finite(point.slowdown(), 1, 100))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the host profile's time sharing needs ranks_per_core rising from above 1 and a "
          "slowdown in [1, 100]; got ", point.ranks_per_core(), " ranks a core slowed ",
          point.slowdown(), "x (recalibrate with tools/calibrate_sim.sh)"));
    }
    last_ratio = point.ranks_per_core();
  }
  // Events grow with ranks x steps: keep a run to minutes.
  if (static_cast<double>(s.ranks) * s.steps > 5e7) {
    return absl::InvalidArgumentError(absl::StrCat(
        s.ranks, " ranks x ", s.steps, " steps is more than the simulator runs (5e7 rank-steps)"));
  }
  if (s.kill_rank != -1 && s.strategy != "gossip" && s.strategy != "moshpit") {
    return absl::InvalidArgumentError(absl::StrCat(
        "a killed rank is modelled for gossip and moshpit only (", s.strategy,
        " stops with its rank, as rdmaflow_train does)"));
  }
  RETURN_IF_ERROR(CheckLink(s.network, "network"));
  RETURN_IF_ERROR(CheckLink(s.local, "host"));
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> SimulatedStrategies() {
  return {"ps", "allreduce", "layer_separated", "gossip", "moshpit"};
}

absl::StatusOr<SimulatedRun> Simulate(const Scenario& scenario) {
  RETURN_IF_ERROR(CheckScenario(scenario));
  ASSIGN_OR_RETURN(internal::Costs costs, internal::CostsOf(scenario.model));
  internal::Job job(scenario, std::move(costs));
  absl::StatusOr<double> samples;
  const std::string& s = scenario.strategy;
  if (s == "ps") {
    samples = internal::RunParameterServer(job);
  } else if (s == "allreduce") {
    samples = internal::RunAllReduce(job);
  } else if (s == "layer_separated") {
    samples = internal::RunLayerSeparated(job);
  } else if (s == "gossip") {
    samples = internal::RunGossip(job);
  } else if (s == "moshpit") {
    samples = internal::RunMoshpit(job);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "the simulator does not know strategy '", s, "' (known: ",
        absl::StrJoin(SimulatedStrategies(), ", "), ")"));
  }
  if (!samples.ok()) return samples.status();
  // Every model runs the reporting rank (never the killed one) to the end;
  // one that stops early is a modelling bug, not a result.
  if (job.log().steps != scenario.steps) {
    return absl::InternalError(absl::StrCat(
        "the ", s, " model stopped after ", job.log().steps, " of ", scenario.steps,
        " steps of the reporting rank (a simulator bug: please report the scenario)"));
  }
  return job.Result(*samples);
}

}  // namespace rdmaflow::sim
