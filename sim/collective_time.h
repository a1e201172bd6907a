// File: collective_time.h
// -----------------------------------------------------------------------------
// How long rdmaflow's all-reduce takes, modelled as collectives/ runs it
// (docs/collectives.md), for the simulator:
//   - every member on one host, over shared memory: the host paths. Up to
//     64 KiB one-shot (every member reduces every peer's range), above it
//     scatter-gather (member p reduces segment p from every peer, then copies
//     the others' segments out). Bound by the members' reduce and copy
//     bandwidth, shared out over the host's cores;
//   - several hosts, some with two or more members: hierarchical (reduce to
//     each host's leader, a ring of the leaders, broadcast back);
//   - else the ring: 2 (n - 1) steps of bytes / n each, sent in pieces of
//     at most `chunk_bytes` (one message each), the reduce of a piece
//     overlapping the next piece's transfer.
// Buckets run one after another (the strategies call them in turn).
#ifndef RDMAFLOW_SIM_COLLECTIVE_TIME_H_
#define RDMAFLOW_SIM_COLLECTIVE_TIME_H_

#include <string>
#include <vector>

#include "sim/event_loop.h"
#include "sim/sim.pb.h"

namespace rdmaflow::sim {

struct AllReduceCost {
  double seconds = 0;     // from the last member's arrival to the end
  double wire_bytes = 0;  // over every member, on any link
  std::string algorithm;  // "ring", "host-one-shot", "host-scatter-gather",
                          // "hierarchical", "none" (one member)
};

struct AllReduceShape {
  double chunk_bytes = 256 * 1024;   // the ring's piece (data_parallel.h)
  double bucket_bytes = 4 << 20;     // 0: one bucket
  double one_shot_bytes = 64 * 1024; // host one-shot up to this size
  // Network bytes a member's shaper lets through at once at the start (the
  // tokens it saved while idle; LinkProfile.burst_bytes): taken off the
  // ring's first sends.
  double burst_tokens = 0;
};

// One all-reduce of `bytes` (float32) among `members` (distinct ranks of
// `topology`), every bucket of it.
AllReduceCost AllReduceTime(const Topology& topology, const HostProfile& host,
                            const std::vector<int>& members, double bytes,
                            const AllReduceShape& shape = {});

}  // namespace rdmaflow::sim

#endif  // RDMAFLOW_SIM_COLLECTIVE_TIME_H_
