// File: gossip_strategy.h
// -----------------------------------------------------------------------------
// Gossiping SGD ("gossip", Jin et al. 2016): every rank trains its own
// replica with local SGD and, every `period` steps, publishes its
// parameters in a versioned buffer (runtime/versioned_buffer.h), reads one
// peer's latest parameters with one-sided READs (never a torn tensor: the
// seqlock retries) and mixes:  theta_i <- (1 - beta) theta_i + beta theta_j.
// The peer (peer_selector.h) is drawn uniformly at random (seeded) or is the
// next rank on a ring. The peer's CPU is not involved on transports with
// true one-sided reads. Parameters: beta (0.5), period (1), topology
// (random|ring), copies (versions kept per buffer, 3).
// See docs/strategies.md.
#ifndef RDMAFLOW_STRATEGIES_GOSSIP_GOSSIP_STRATEGY_H_
#define RDMAFLOW_STRATEGIES_GOSSIP_GOSSIP_STRATEGY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rdma/memory_region.h"
#include "runtime/versioned_buffer.h"
#include "strategies/gossip/peer_selector.h"
#include "strategies/local_sgd_strategy.h"

namespace rdmaflow::strategies::gossip {

struct GossipOptions {
  double beta = 0.5;
  int period = 1;
  Topology topology = Topology::kRandom;
  int copies = 3;
  uint64_t seed = 1;
};

// Thread-compatible: one thread drives a rank's strategy.
class GossipStrategy final : public LocalSgdStrategy {
 public:
  // kInvalidArgument for bad parameters (beta outside (0, 1], ...).
  static absl::StatusOr<std::unique_ptr<GossipStrategy>> Create(
      const StrategyOptions& options);

  std::string name() const override { return "gossip"; }
  absl::StatusOr<graph::GraphDef> Prepare(const StrategyContext& context,
                                          std::vector<Parameter> parameters) override;
  absl::Status Start() override;
  absl::Status Finish() override;

  // The peers this rank mixed with, in order (for tests).
  const std::vector<int>& peers_mixed() const { return peers_mixed_; }

 private:
  GossipStrategy(StrategyOptions options, GossipOptions gossip)
      : LocalSgdStrategy(std::move(options), gossip.period), gossip_(gossip) {}
  std::string Ns() const;
  void Publish();
  // Publishes, then mixes with the next peer's latest parameters.
  absl::Status Exchange() override;

  const GossipOptions gossip_;
  size_t bytes_ = 0;
  std::unique_ptr<PeerSelector> selector_;
  std::unique_ptr<runtime::VersionedBuffer> published_;
  std::vector<std::unique_ptr<runtime::VersionedReader>> readers_;  // by rank
  std::unique_ptr<rdma::MemoryRegion> scratch_;  // a peer's parameters
  torch::Tensor peer_;                           // view of scratch_
  std::vector<int> peers_mixed_;
  bool finished_ = false;
};

}  // namespace rdmaflow::strategies::gossip

#endif  // RDMAFLOW_STRATEGIES_GOSSIP_GOSSIP_STRATEGY_H_
