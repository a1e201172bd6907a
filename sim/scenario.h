// File: scenario.h
// -----------------------------------------------------------------------------
// What Simulate() (simulate.h) predicts: a model, a strategy with its
// settings, the ranks and how they sit on hosts, the links, and what goes
// wrong. Its own header so that the simulator's internals (sim/internal/)
// build as libraries of their own.
#ifndef RDMAFLOW_SIM_SCENARIO_H_
#define RDMAFLOW_SIM_SCENARIO_H_

#include <cstdint>
#include <map>
#include <string>

#include "sim/sim.pb.h"

namespace rdmaflow::sim {

// The smallest measured LinkProfile.unattended_bytes: a socket's buffer
// holds at least a page, and a smaller positive figure would split a read
// into needlessly many events. (0 stays "not measured".)
inline constexpr double kMinUnattendedBytes = 4096;

// Value type.
struct Scenario {
  ModelProfile model;
  HostProfile host;
  LinkProfile network;  // between hosts
  LinkProfile local;    // within a host
  // "ps", "allreduce", "layer_separated", "gossip", "moshpit", and its
  // settings as rdmaflow_train takes them (ps: servers=, sync=;
  // layer_separated: fc_ranks=; gossip: mode=, period=, topology=;
  // moshpit: side=, dims=, period=, group_timeout_ms=; all-reduce users:
  // bucket_bytes=, chunk_bytes=).
  std::string strategy;
  std::map<std::string, std::string> params;
  int ranks = 2;
  int ranks_per_host = 1;
  // > 0: all hosts share this many cores (namespace hosts on one machine);
  // else each host has host.cores().
  int shared_cores = 0;
  int steps = 20;
  // A straggler: this rank's compute takes slow_factor times as long (it
  // sleeps the difference, as rdmaflow_train's --slow_rank does).
  int slow_rank = -1;
  double slow_factor = 1;
  // Every compute varies by a factor drawn uniformly from
  // [1 - jitter, 1 + jitter].
  double jitter = 0;
  // Churn: this rank is gone from before step kill_step on.
  int kill_rank = -1;
  int kill_step = 0;
  uint64_t seed = 1;
};

}  // namespace rdmaflow::sim

#endif  // RDMAFLOW_SIM_SCENARIO_H_
