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

int PeerSelector::Next() {
  if (topology_ == Topology::kRing) return (rank_ + 1) % world_;
  // Uniform over the world_ - 1 others.
  std::uniform_int_distribution<int> pick(0, world_ - 2);
  const int other = pick(generator_);
  return other >= rank_ ? other + 1 : other;
}

}  // namespace rdmaflow::strategies::gossip
