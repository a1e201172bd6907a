// File: peer_selector.h
// -----------------------------------------------------------------------------
// Which peer a gossiping rank mixes with next: `random` draws uniformly
// among the other ranks from a generator seeded with (seed, rank), so a run
// is reproducible; `ring` always takes the next rank. Ranks marked gone
// (dead peers) are skipped.
#ifndef RDMAFLOW_STRATEGIES_GOSSIP_PEER_SELECTOR_H_
#define RDMAFLOW_STRATEGIES_GOSSIP_PEER_SELECTOR_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace rdmaflow::strategies::gossip {

enum class Topology { kRandom, kRing };

absl::StatusOr<Topology> ParseTopology(const std::string& name);

// Value type. world >= 2.
class PeerSelector {
 public:
  PeerSelector(Topology topology, int rank, int world, uint64_t seed);
  // The next peer; `gone` (by rank, empty for none) marks ranks to skip.
  // -1 when every other rank is gone.
  int Next(const std::vector<bool>& gone = {});

 private:
  Topology topology_;
  int rank_;
  int world_;
  std::mt19937_64 generator_;
};

}  // namespace rdmaflow::strategies::gossip

#endif  // RDMAFLOW_STRATEGIES_GOSSIP_PEER_SELECTOR_H_
