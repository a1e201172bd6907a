// File: event_loop.cc
#include "sim/event_loop.h"

#include <algorithm>
#include <utility>

#include "absl/base/macros.h"

namespace rdmaflow::sim {

double Topology::PortSeconds(int a, int b, double bytes) const {
  const LinkProfile& l = link(a, b);
  return l.per_message_us() * 1e-6 + bytes / (l.bandwidth_gbps() * 1e9);
}

double Topology::LatencySeconds(int a, int b) const {
  return link(a, b).latency_us() * 1e-6;
}

EventLoop::EventLoop(Topology topology)
    : topology_(std::move(topology)),
      // A pool needs no more cores than two a rank it serves: the rank's
      // compute and its communication thread's work (overlap=on).
      core_free_(topology_.shared_cores > 0 ? 1 : topology_.hosts(),
                 std::vector<double>(
                     std::max(1, std::min(topology_.pool_cores(),
                                          2 * (topology_.shared_cores > 0
                                                   ? topology_.ranks
                                                   : topology_.ranks_per_host))),
                     0.0)),
      local_egress_(topology_.ranks, Port{0, topology_.local.burst_bytes()}),
      local_ingress_(topology_.ranks, Port{0, topology_.local.burst_bytes()}),
      network_egress_(topology_.ranks, Port{0, topology_.network.burst_bytes()}),
      network_ingress_(topology_.ranks, Port{0, topology_.network.burst_bytes()}) {}

void EventLoop::At(double time, Callback fn) {
  queue_.push_back(Event{std::max(time, now_), next_sequence_++, std::move(fn)});
  std::push_heap(queue_.begin(), queue_.end(), Later);
}

void EventLoop::After(double seconds, Callback fn) {
  ABSL_ASSERT(seconds >= 0);
  At(now_ + std::max(0.0, seconds), std::move(fn));
}

void EventLoop::Compute(int rank, double seconds, Callback done) {
  ABSL_ASSERT(rank >= 0 && rank < topology_.ranks);
  std::vector<double>& cores = core_free_[topology_.core_pool(rank)];
  auto core = std::min_element(cores.begin(), cores.end());
  const double start = std::max(now_, *core);
  *core = start + std::max(0.0, seconds);
  At(*core, std::move(done));
}

double EventLoop::Transfer(int src, int dst, double bytes, Callback done) {
  ABSL_ASSERT(src >= 0 && src < topology_.ranks && dst >= 0 && dst < topology_.ranks);
  wire_bytes_ += bytes;
  const bool local = topology_.same_host(src, dst);
  Port& egress = local ? local_egress_[src] : network_egress_[src];
  Port& ingress = local ? local_ingress_[dst] : network_ingress_[dst];
  const LinkProfile& link = topology_.link(src, dst);
  const double rate = std::max(link.bandwidth_gbps(), 1e-9) * 1e9;
  const double burst = std::max(0.0, link.burst_bytes());
  const double start = std::max({now_, egress.free, ingress.free});
  // Tokens saved up since each port went idle, up to the burst.
  const double tokens =
      std::min(std::min(burst, egress.tokens + (start - egress.free) * rate),
               std::min(burst, ingress.tokens + (start - ingress.free) * rate));
  // Bytes the tokens cover pass at once; the rest at the link's rate.
  const double shaped = std::max(0.0, bytes - tokens);
  const double end = start + link.per_message_us() * 1e-6 + shaped / rate;
  const double left = std::max(0.0, tokens - bytes);
  egress = ingress = Port{end, left};
  const double arrival = end + topology_.LatencySeconds(src, dst);
  At(arrival, std::move(done));
  return arrival;
}

void EventLoop::Run() {
  stopped_ = false;
  while (!queue_.empty() && !stopped_) {
    std::pop_heap(queue_.begin(), queue_.end(), Later);
    Event event = std::move(queue_.back());
    queue_.pop_back();
    now_ = event.time;
    event.fn();
  }
}

}  // namespace rdmaflow::sim
