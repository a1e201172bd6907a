// File: test_hosts.h
// -----------------------------------------------------------------------------
// The scenario the simulator's event-level tests (job_test,
// background_exchange_test) share, with round numbers to check against.
#ifndef RDMAFLOW_SIM_INTERNAL_TEST_HOSTS_H_
#define RDMAFLOW_SIM_INTERNAL_TEST_HOSTS_H_

#include "sim/scenario.h"

namespace rdmaflow::sim::internal {

// `ranks` ranks, one a host, each with 4 cores of its own; a link of 1 MB/s
// (a byte a microsecond), 10 us of latency, no per-message cost, whose
// one-sided operations need their target's progress when `emulated` (UCX
// over TCP).
inline Scenario SlowLinkHosts(int ranks, bool emulated) {
  Scenario s;
  s.ranks = ranks;
  s.host.set_cores(4);
  s.network.set_name("test");
  s.network.set_latency_us(10);
  s.network.set_bandwidth_gbps(1e-3);
  s.network.set_needs_target_progress(emulated);
  s.local = s.network;
  return s;
}

}  // namespace rdmaflow::sim::internal

#endif  // RDMAFLOW_SIM_INTERNAL_TEST_HOSTS_H_
