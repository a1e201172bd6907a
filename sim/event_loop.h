// File: event_loop.h
// -----------------------------------------------------------------------------
// The simulator's clock and its resources: a discrete-event loop over
// simulated seconds, with the three things a training step waits for:
//   - cores: a host's ranks share `cores` CPUs; compute queues on the one
//     that frees first (run to completion, first come first served);
//   - ports: a message of b bytes from rank s to rank d holds s's egress and
//     d's ingress port for per_message + b / bandwidth, then arrives
//     `latency` later (several messages in flight share no time: a port
//     serves them one after another, as a NIC's queue does). A link with a
//     shaper's burst (LinkProfile.burst_bytes) lets bytes covered by the
//     tokens saved up while idle through at once;
//   - time alone: sleeps and waits that hold nothing (a straggler's sleep,
//     a store round trip).
// Ranks on the same host talk over the host's link (shared memory), ranks on
// different hosts over the network link; each has its own ports.
//
// Strategies are written as callbacks: each operation takes a continuation
// that runs at the simulated time the operation ends. Events at the same
// time run in the order they were scheduled, so a run is deterministic.
//
//   EventLoop loop(topology);
//   loop.Compute(0, 0.010, [&] { loop.Transfer(0, 1, 4096, [&] { ... }); });
//   loop.Run();
#ifndef RDMAFLOW_SIM_EVENT_LOOP_H_
#define RDMAFLOW_SIM_EVENT_LOOP_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "sim/sim.pb.h"

namespace rdmaflow::sim {

// Where the ranks run and what connects them. Value type.
struct Topology {
  int ranks = 1;
  int ranks_per_host = 1;  // ranks r*k .. r*k+k-1 share host r
  int cores_per_host = 1;
  // > 0: every host's ranks share one pool of this many cores (namespace
  // "hosts" on one machine, as the validation runs); cores_per_host is
  // then ignored.
  int shared_cores = 0;
  LinkProfile network;  // between hosts
  LinkProfile local;    // within a host
  int host(int rank) const { return rank / ranks_per_host; }
  int hosts() const { return (ranks + ranks_per_host - 1) / ranks_per_host; }
  bool same_host(int a, int b) const { return host(a) == host(b); }
  // Which pool of cores `rank` computes on, and how many cores it has.
  int core_pool(int rank) const { return shared_cores > 0 ? 0 : host(rank); }
  int pool_cores() const { return shared_cores > 0 ? shared_cores : cores_per_host; }
  const LinkProfile& link(int a, int b) const {
    return same_host(a, b) ? local : network;
  }
  // Seconds a message of `bytes` holds a port of the link between a and b,
  // and its one-way latency.
  double PortSeconds(int a, int b, double bytes) const;
  double LatencySeconds(int a, int b) const;
};

// Single-threaded.
class EventLoop {
 public:
  using Callback = std::function<void()>;

  explicit EventLoop(Topology topology);
  const Topology& topology() const { return topology_; }

  // Simulated seconds since the start.
  double now() const { return now_; }
  // Runs `fn` at now() + seconds (>= 0).
  void After(double seconds, Callback fn);
  // `seconds` of compute on one of `rank`'s host cores, queued behind the
  // work already given to them; `done` runs when it ends.
  void Compute(int rank, double seconds, Callback done);
  // A one-way message (a write, or a read's returning data: pass the data's
  // sender as `src`); `done` runs when its last byte has arrived, the time
  // it returns. Counts its bytes on the wire.
  double Transfer(int src, int dst, double bytes, Callback done);
  // Counts bytes a modelled collective moves without Transfer calls.
  void CountWireBytes(double bytes) { wire_bytes_ += bytes; }
  double wire_bytes() const { return wire_bytes_; }

  // Runs events until none is left or Stop() is called.
  void Run();
  void Stop() { stopped_ = true; }

 private:
  struct Event {
    double time;
    uint64_t sequence;
    Callback fn;
  };
  // Heap order: the earliest event on top; at the same time, the one
  // scheduled first.
  static bool Later(const Event& a, const Event& b) {
    return a.time != b.time ? a.time > b.time : a.sequence > b.sequence;
  }

  void At(double time, Callback fn);

  const Topology topology_;
  double now_ = 0;
  uint64_t next_sequence_ = 0;
  bool stopped_ = false;
  std::vector<Event> queue_;  // a heap by Later()
  std::vector<std::vector<double>> core_free_;  // [host][core]
  // A port: when it is free, and its shaper's tokens at that time.
  struct Port {
    double free = 0;
    double tokens = 0;
  };
  std::vector<Port> local_egress_, local_ingress_;
  std::vector<Port> network_egress_, network_ingress_;
  double wire_bytes_ = 0;
};

}  // namespace rdmaflow::sim

#endif  // RDMAFLOW_SIM_EVENT_LOOP_H_
