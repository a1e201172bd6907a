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
#include "strategies/local_sgd.h"
#include "strategies/strategy.h"

namespace rdmaflow::strategies::gossip {

struct GossipOptions {
  double beta = 0.5;
  int period = 1;
  Topology topology = Topology::kRandom;
  int copies = 3;
  uint64_t seed = 1;
};

// Thread-compatible: one thread drives a rank's strategy.
class GossipStrategy final : public Strategy {
 public:
  // kInvalidArgument for bad parameters (beta outside (0, 1], ...).
  static absl::StatusOr<std::unique_ptr<GossipStrategy>> Create(
      const StrategyOptions& options);

  std::string name() const override { return "gossip"; }
  std::string role() const override { return "peer"; }
  bool computes() const override { return true; }
  int workers() const override { return context_.world_size; }
  int worker_index() const override { return context_.rank; }
  absl::StatusOr<graph::GraphDef> Prepare(const StrategyContext& context,
                                          std::vector<Parameter> parameters) override;
  absl::Status Start() override;
  absl::StatusOr<StepReport> Step(const ComputeFn& compute) override;
  bool done() const override { return clock_ >= options_.steps; }
  absl::Status Finish() override;
  runtime::TransferCounters counters() const override { return counters_; }

  // The peers this rank mixed with, in order (for tests).
  const std::vector<int>& peers_mixed() const { return peers_mixed_; }

 private:
  GossipStrategy(StrategyOptions options, GossipOptions gossip)
      : options_(std::move(options)), gossip_(gossip) {}
  std::string Ns() const;
  absl::Status Publish();
  absl::Status MixWithPeer();

  const StrategyOptions options_;
  const GossipOptions gossip_;
  StrategyContext context_;
  std::unique_ptr<LocalSgd> replica_;  // the parameters, flat
  size_t bytes_ = 0;
  std::unique_ptr<PeerSelector> selector_;
  std::unique_ptr<runtime::VersionedBuffer> published_;
  std::vector<std::unique_ptr<runtime::VersionedReader>> readers_;  // by rank
  std::unique_ptr<rdma::MemoryRegion> scratch_;  // a peer's parameters
  torch::Tensor peer_;                           // view of scratch_
  std::vector<int> peers_mixed_;
  runtime::TransferCounters counters_;
  int64_t clock_ = 0;
  bool started_ = false;
  bool finished_ = false;
};

}  // namespace rdmaflow::strategies::gossip

#endif  // RDMAFLOW_STRATEGIES_GOSSIP_GOSSIP_STRATEGY_H_
