// File: peer_selector.cc
#include "strategies/gossip/peer_selector.h"

#include "absl/strings/str_cat.h"

namespace rdmaflow::strategies::gossip {

absl::StatusOr<Topology> ParseTopology(const std::string& name) {
  if (name == "random") return Topology::kRandom;
  if (name == "ring") return Topology::kRing;
  return absl::InvalidArgumentError(
      absl::StrCat("gossip topology must be random or ring, got '", name, "'"));
}

PeerSelector::PeerSelector(Topology topology, int rank, int world, uint64_t seed)
    : topology_(topology),
      rank_(rank),
      world_(world),
      generator_(seed * 1000003 + static_cast<uint64_t>(rank)) {}

int PeerSelector::Next(const std::vector<bool>& gone) {
  auto live = [&](int r) {
    return r != rank_ && (static_cast<size_t>(r) >= gone.size() || !gone[r]);
  };
  if (topology_ == Topology::kRing) {
    for (int step = 1; step < world_; ++step) {
      if (live((rank_ + step) % world_)) return (rank_ + step) % world_;
    }
    return -1;
  }
  // Uniform over the live others.
  std::vector<int> others;
  for (int r = 0; r < world_; ++r) {
    if (live(r)) others.push_back(r);
  }
  if (others.empty()) return -1;
  std::uniform_int_distribution<size_t> pick(0, others.size() - 1);
  return others[pick(generator_)];
}

}  // namespace rdmaflow::strategies::gossip
