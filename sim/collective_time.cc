// File: collective_time.cc
#include "sim/collective_time.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace rdmaflow::sim {
namespace {

double Bandwidth(double gbps) { return std::max(gbps, 1e-9) * 1e9; }

// How many times slower each member's share of a host's work runs when
// `members` ranks of one host compete for `cores`.
double Oversubscription(int members, int cores) {
  return std::max(1.0, static_cast<double>(members) / std::max(1, cores));
}

// Whether a ring of `members` on `cores` shared cores is at least as
// oversubscribed as the one the link's shared-ring bandwidth was measured
// with (shared_ring_ranks on the calibration's host.cores()).
bool RingAsSharedAsMeasured(const LinkProfile& link, const HostProfile& host, int members,
                            int cores) {
  if (!(link.shared_ring_gbps() > 0) || members <= cores) return false;
  const double measured = link.shared_ring_ranks() > 0
                              ? static_cast<double>(link.shared_ring_ranks()) /
                                    std::max(1, host.cores())
                              : 1.0;
  return static_cast<double>(members) / std::max(1, cores) >= measured;
}

// The ring over `n` members connected by `link`, one bucket of `bytes`.
// `shared`: its members share too few cores (RingAsSharedAsMeasured), so it
// runs at the link's measured shared-ring bandwidth where that is lower.
double RingSeconds(const LinkProfile& link, const HostProfile& host, int n,
                   double bytes, double chunk_bytes, double oversubscription, bool shared) {
  if (n <= 1 || bytes <= 0) return 0;
  const double segment = bytes / n;
  const double pieces = std::max(1.0, std::ceil(segment / chunk_bytes));
  const double latency = link.latency_us() * 1e-6;
  const double messages = pieces * link.per_message_us() * 1e-6;
  double gbps = link.bandwidth_gbps();
  if (shared && link.shared_ring_gbps() > 0) gbps = std::min(gbps, link.shared_ring_gbps());
  const double send = segment / Bandwidth(gbps);
  const double reduce = segment / Bandwidth(host.reduce_gbps()) * oversubscription;
  // Reduce-scatter steps wait for the slower of the piece's transfer and its
  // reduction; all-gather steps write straight into place.
  return (n - 1) * (latency + messages + std::max(send, reduce)) +
         (n - 1) * (latency + messages + send);
}

// The host paths over `k` members sharing `cores`: reduce, and (unless only
// the leader needs the sum) copy the others' results out.
double HostSeconds(const LinkProfile& local, const HostProfile& host, int k,
                   double bytes, bool one_shot, bool copy_out, double slow) {
  if (k <= 1 || bytes <= 0) return 0;
  const double reduce_bw = Bandwidth(host.reduce_gbps());
  const double copy_bw = Bandwidth(host.memcpy_gbps());
  const double flags = 2 * local.latency_us() * 1e-6;
  // Work of one member, then the members' work shared over the cores.
  double work;
  if (one_shot) {
    work = (k - 1) * bytes / reduce_bw;
  } else {
    const double segment = bytes / k;
    work = (k - 1) * segment / reduce_bw + (copy_out ? (k - 1) * segment / copy_bw : 0);
  }
  return flags + work * slow;
}

// The time a shaper's saved tokens take off sending `bytes` (what one member
// sends), and the tokens left.
double Burst(const LinkProfile& link, double bytes, double* tokens) {
  const double covered = std::min(*tokens, bytes);
  *tokens -= covered;
  return covered / Bandwidth(link.bandwidth_gbps());
}

}  // namespace

AllReduceCost AllReduceTime(const Topology& topology, const HostProfile& host,
                            const std::vector<int>& members, double bytes,
                            const AllReduceShape& shape) {
  AllReduceCost cost;
  double tokens = std::max(0.0, shape.burst_tokens);
  double network_sent = 0;  // by one member, over the network link
  const int n = static_cast<int>(members.size());
  if (n <= 1 || bytes <= 0) {
    cost.algorithm = "none";
    return cost;
  }
  std::map<int, int> per_host;
  for (int rank : members) ++per_host[topology.host(rank)];
  const int hosts = static_cast<int>(per_host.size());
  int largest = 0;
  for (const auto& [h, count] : per_host) largest = std::max(largest, count);
  // Members competing for one pool of cores, and its size.
  const int cores = topology.pool_cores();
  // How many times slower a member's share of reductions and copies runs:
  // its host's members on its host's cores, or every member on the
  // machine's shared cores.
  const double slow = topology.shared_cores > 0 ? Oversubscription(n, cores)
                                                : Oversubscription(largest, cores);

  // Buckets: `whole` of bucket_bytes (all alike: one is costed and
  // counted that many times), then the rest.
  std::vector<std::pair<double, double>> buckets;  // (bytes, how many)
  if (shape.bucket_bytes <= 0 || bytes <= shape.bucket_bytes) {
    buckets.push_back({bytes, 1});
  } else {
    const double whole = std::floor(bytes / shape.bucket_bytes);
    buckets.push_back({shape.bucket_bytes, whole});
    const double rest = bytes - whole * shape.bucket_bytes;
    if (rest > 0) buckets.push_back({rest, 1});
  }

  for (const auto& [b, times] : buckets) {
    const double seconds_before = cost.seconds, wire_before = cost.wire_bytes;
    if (hosts == 1) {
      const bool one_shot = b <= shape.one_shot_bytes;
      cost.algorithm = one_shot ? "host-one-shot" : "host-scatter-gather";
      cost.seconds += HostSeconds(topology.local, host, n, b, one_shot,
                                  /*copy_out=*/true, slow);
      cost.wire_bytes += one_shot ? static_cast<double>(n) * (n - 1) * b : 2.0 * (n - 1) * b;
    } else if (largest >= 2) {
      cost.algorithm = "hierarchical";
      // Reduce to the leaders, the leaders' ring, broadcast back (a copy).
      const double within = HostSeconds(topology.local, host, largest, b,
                                        b <= shape.one_shot_bytes, false, slow);
      const double ring = RingSeconds(topology.network, host, hosts, b, shape.chunk_bytes,
                                      topology.shared_cores > 0 ? slow : 1.0,
                                      topology.shared_cores > 0 &&
                                          RingAsSharedAsMeasured(topology.network, host,
                                                                 hosts, cores));
      network_sent += times * 2.0 * (hosts - 1) / hosts * b;
      const double broadcast =
          b / Bandwidth(host.memcpy_gbps()) * slow +
          topology.local.latency_us() * 1e-6;
      cost.seconds += within + ring + broadcast;
      cost.wire_bytes += 2.0 * (n - hosts) * b + 2.0 * (hosts - 1) * b;
    } else {
      cost.algorithm = "ring";
      cost.seconds += RingSeconds(
          topology.network, host, n, b, shape.chunk_bytes, slow,
          topology.shared_cores > 0 && RingAsSharedAsMeasured(topology.network, host, n, cores));
      cost.wire_bytes += 2.0 * (n - 1) * b;
      network_sent += times * 2.0 * (n - 1) / n * b;
    }
    cost.seconds = seconds_before + (cost.seconds - seconds_before) * times;
    cost.wire_bytes = wire_before + (cost.wire_bytes - wire_before) * times;
  }
  // A shaper's saved tokens let a member's first network bytes through at
  // once.
  cost.seconds = std::max(0.0, cost.seconds - Burst(topology.network, network_sent, &tokens));
  return cost;
}

}  // namespace rdmaflow::sim
