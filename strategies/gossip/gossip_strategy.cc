// File: gossip_strategy.cc
#include "strategies/gossip/gossip_strategy.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph_analyzer/graph_builder.h"
#include "rdma/rendezvous.h"
#include "strategies/strategy_params.h"

namespace rdmaflow::strategies::gossip {

absl::StatusOr<std::unique_ptr<GossipStrategy>> GossipStrategy::Create(
    const StrategyOptions& options) {
  GossipOptions gossip;
  std::string topology = "random";
  int64_t seed = 1;
  StrategyParams params("gossip", options.params);
  RETURN_IF_ERROR(params.Real("beta", 1e-6, 1.0, &gossip.beta));
  RETURN_IF_ERROR(params.Int("period", 1, &gossip.period));
  RETURN_IF_ERROR(params.Choice("topology", {"random", "ring"}, &topology));
  RETURN_IF_ERROR(params.Int("copies", 2, &gossip.copies));
  RETURN_IF_ERROR(params.Int("seed", int64_t{0}, &seed));
  RETURN_IF_ERROR(params.Done());
  RETURN_IF_ERROR(CheckTrainingOptions("gossip", options.steps,
                                       options.learning_rate, options.momentum));
  ASSIGN_OR_RETURN(gossip.topology, ParseTopology(topology));
  gossip.seed = static_cast<uint64_t>(seed);
  return std::unique_ptr<GossipStrategy>(new GossipStrategy(options, gossip));
}

std::string GossipStrategy::Ns() const {
  return absl::StrCat(options_.communicator_options.ns, "/gossip");
}

absl::StatusOr<graph::GraphDef> GossipStrategy::Prepare(
    const StrategyContext& context, std::vector<Parameter> parameters) {
  RETURN_IF_ERROR(Adopt(context, std::move(parameters), 2));
  bytes_ = replica_->bytes();
  // Declared: each rank's published parameters (read by its peers).
  graph::GraphBuilder b("gossip");
  b.SetWorldSize(context.world_size);
  for (int r = 0; r < context.world_size; ++r) {
    b.SetRank(r);
    b.Variable(absl::StrCat("r", r, "/params"), graph::DT_FLOAT32,
               {static_cast<int64_t>(bytes_ / sizeof(float))});
  }
  return std::move(b).Build();
}

absl::Status GossipStrategy::Start() {
  if (bytes_ == 0) return absl::FailedPreconditionError("gossip: Prepare() first");
  if (started()) return absl::FailedPreconditionError("gossip: started twice");
  const int64_t elements = bytes_ / sizeof(float);
  rdma::Transport& transport = *context_.transport;
  ASSIGN_OR_RETURN(published_, runtime::VersionedBuffer::Create(
                                   transport, *context_.store, Ns(),
                                   absl::StrCat("r", context_.rank), bytes_,
                                   gossip_.copies));
  Publish();
  readers_.resize(context_.world_size);
  for (int r = 0; r < context_.world_size; ++r) {
    if (r == context_.rank) continue;
    ASSIGN_OR_RETURN(readers_[r], runtime::VersionedReader::Create(
                                      transport, *context_.store, Ns(),
                                      absl::StrCat("r", r), r,
                                      options_.communicator_options.timeout));
  }
  ASSIGN_OR_RETURN(rdma::MemoryRegion scratch, transport.Allocate(bytes_));
  scratch_ = std::make_unique<rdma::MemoryRegion>(std::move(scratch));
  peer_ = torch::from_blob(scratch_->data(), {elements}, torch::kFloat32);
  selector_ = std::make_unique<PeerSelector>(gossip_.topology, context_.rank,
                                             context_.world_size, gossip_.seed);
  // Nobody reads a peer before every peer has published its first version.
  RETURN_IF_ERROR(rdma::Barrier(*context_.store, Ns(), "published", context_.world_size,
                                options_.communicator_options.timeout, &transport));
  MarkStarted();
  return absl::OkStatus();
}

void GossipStrategy::Publish() {
  published_->Update([&](std::byte* next, const std::byte*) {
    std::memcpy(next, replica_->flat().data_ptr<float>(), bytes_);
  });
}

absl::Status GossipStrategy::Exchange() {
  Publish();
  const int peer = selector_->Next();
  RETURN_IF_ERROR(readers_[peer]->Read({scratch_.get(), 0, bytes_}).status());
  ++counters_.tensors_received;
  counters_.bytes_read += static_cast<int64_t>(bytes_);
  torch::NoGradGuard no_grad;
  replica_->flat().mul_(1.0 - gossip_.beta).add_(peer_, gossip_.beta);
  peers_mixed_.push_back(peer);
  return absl::OkStatus();
}

absl::Status GossipStrategy::Finish() {
  if (finished_ || !started()) return absl::OkStatus();
  finished_ = true;
  // Peers may still be reading our buffer (over TCP they need our progress).
  return rdma::Barrier(*context_.store, Ns(), "finished", context_.world_size,
                       options_.communicator_options.timeout, context_.transport);
}

}  // namespace rdmaflow::strategies::gossip
