// File: moshpit_strategy.cc
#include "strategies/moshpit/moshpit_strategy.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph_analyzer/graph_builder.h"
#include "strategies/moshpit/moshpit_group.h"
#include "strategies/strategy_params.h"

namespace rdmaflow::strategies::moshpit {

absl::StatusOr<std::unique_ptr<MoshpitStrategy>> MoshpitStrategy::Create(
    const StrategyOptions& options) {
  MoshpitOptions moshpit;
  int64_t group_ms = 2000, round_ms = 10000;
  StrategyParams params("moshpit", options.params);
  RETURN_IF_ERROR(params.Int("side", 2, &moshpit.side));
  RETURN_IF_ERROR(params.Int("dims", 0, &moshpit.dims));
  RETURN_IF_ERROR(params.Int("period", 1, &moshpit.period));
  RETURN_IF_ERROR(params.Int("group_timeout_ms", int64_t{1}, &group_ms));
  RETURN_IF_ERROR(params.Int("round_timeout_ms", int64_t{1}, &round_ms));
  RETURN_IF_ERROR(params.Done());
  RETURN_IF_ERROR(CheckTrainingOptions("moshpit", options.steps, options.learning_rate,
                                       options.momentum));
  moshpit.group_timeout = absl::Milliseconds(group_ms);
  moshpit.round_timeout = absl::Milliseconds(round_ms);
  return std::unique_ptr<MoshpitStrategy>(new MoshpitStrategy(options, moshpit));
}

absl::StatusOr<graph::GraphDef> MoshpitStrategy::Prepare(
    const StrategyContext& context, std::vector<Parameter> parameters) {
  ASSIGN_OR_RETURN(MoshpitGrid grid,
                   MoshpitGrid::Create(context.world_size, moshpit_.side, moshpit_.dims));
  grid_ = std::make_unique<MoshpitGrid>(grid);
  RETURN_IF_ERROR(Adopt(context, std::move(parameters), 1));
  // Declared: each rank's flat parameters (the rounds' rings plan their
  // own slots).
  graph::GraphBuilder b("moshpit");
  b.SetWorldSize(context.world_size);
  for (int r = 0; r < context.world_size; ++r) {
    b.SetRank(r);
    b.Variable(absl::StrCat("r", r, "/params"), graph::DT_FLOAT32,
               {static_cast<int64_t>(replica_->bytes() / sizeof(float))});
  }
  return std::move(b).Build();
}

absl::Status MoshpitStrategy::Start() {
  if (replica_ == nullptr) return absl::FailedPreconditionError("moshpit: Prepare() first");
  MarkStarted();
  return absl::OkStatus();
}

absl::Status MoshpitStrategy::Exchange() {
  const int round = round_++;
  const int rank = context_.rank;
  const std::string key = grid_->GroupKey(rank, round);
  const std::string ns =
      absl::StrCat(options_.communicator_options.ns, "/moshpit/t", round, "/", key);
  // Every round bumps our heartbeat; a peer that missed a group is
  // suspected, not waited for, until its heartbeat moves again (it came
  // back), so a dead peer costs one group timeout, not one per round.
  rdma::Store& store = *context_.store;
  const std::string beats = absl::StrCat(options_.communicator_options.ns, "/moshpit/beat/");
  RETURN_IF_ERROR(store.Add(absl::StrCat(beats, rank), 1).status());
  const std::vector<int> grid_group = grid_->GroupOf(rank, round);
  int expected = 0;
  for (int peer : grid_group) {
    if (auto it = suspected_.find(peer); it != suspected_.end()) {
      ASSIGN_OR_RETURN(int64_t beat, store.Add(absl::StrCat(beats, peer), 0));
      if (beat > it->second) suspected_.erase(it);
    }
    if (suspected_.count(peer) == 0) ++expected;
  }
  ASSIGN_OR_RETURN(std::vector<int> members,
                   FormGroup(store, ns, rank, expected, moshpit_.group_timeout));
  group_sizes_.push_back(static_cast<int>(members.size()));
  for (int peer : grid_group) {
    if (std::find(members.begin(), members.end(), peer) != members.end()) continue;
    ASSIGN_OR_RETURN(int64_t beat, store.Add(absl::StrCat(beats, peer), 0));
    Suspect(peer, beat);
  }
  if (members.size() < 2) return absl::OkStatus();
  absl::Status status = Average(members, ns);
  if (!status.ok()) {
    // A member died in the round: keep training, try again next round.
    ++failed_rounds_;
    rings_.erase(members);
    std::fprintf(stderr, "moshpit rank %d: round %d's average in group %s failed: %s\n",
                 rank, round, key.c_str(), status.ToString().c_str());
  }
  return absl::OkStatus();
}

void MoshpitStrategy::Suspect(int peer, int64_t beat) {
  suspected_[peer] = beat;
  // Its rings would stall: drop them (they cannot be shut down with it).
  for (auto it = rings_.begin(); it != rings_.end();) {
    const std::vector<int>& members = it->first;
    if (std::find(members.begin(), members.end(), peer) != members.end()) {
      it = rings_.erase(it);
    } else {
      ++it;
    }
  }
}

absl::StatusOr<collectives::RingAllReduce*> MoshpitStrategy::RingFor(
    const std::vector<int>& members, const std::string& ns) {
  if (auto it = rings_.find(members); it != rings_.end()) return it->second.get();
  collectives::RingAllReduceOptions ring_options;
  ring_options.name = "avg";
  ring_options.capacity_bytes = replica_->bytes();
  ring_options.timeout = moshpit_.round_timeout;
  ASSIGN_OR_RETURN(std::unique_ptr<collectives::RingAllReduce> ring,
                   collectives::RingAllReduce::Create(*context_.transport, *context_.store,
                                                      ns, members, ring_options));
  ++rings_created_;
  collectives::RingAllReduce* kept = ring.get();
  rings_[members] = std::move(ring);
  return kept;
}

absl::Status MoshpitStrategy::Average(const std::vector<int>& members,
                                      const std::string& ns) {
  ASSIGN_OR_RETURN(collectives::RingAllReduce * ring, RingFor(members, ns));
  const int64_t elements = static_cast<int64_t>(replica_->bytes() / sizeof(float));
  const collectives::RingAllReduceStats before = ring->stats();
  std::memcpy(ring->data(), replica_->flat().data_ptr<float>(), replica_->bytes());
  RETURN_IF_ERROR(ring->AllReduce(0, elements, collectives::DataType::kFloat32));
  torch::NoGradGuard no_grad;
  torch::Tensor sum = torch::from_blob(ring->data(), {elements}, torch::kFloat32);
  replica_->flat().copy_(sum).div_(static_cast<double>(members.size()));
  counters_.bytes_sent += ring->stats().bytes_sent - before.bytes_sent;
  counters_.tensors_sent += ring->stats().messages - before.messages;
  return absl::OkStatus();
}

absl::Status MoshpitStrategy::Finish() {
  // std::map order: every peer shuts its rings down in the same order, so
  // the shutdown barriers cannot wait on each other in a cycle.
  for (auto& [members, ring] : rings_) {
    // Members that left the ring (they suspected us) never come: wait no
    // longer than for a group.
    absl::Status status = ring->Shutdown(moshpit_.group_timeout);
    if (!status.ok()) {
      std::fprintf(stderr, "moshpit rank %d: shutting a ring down: %s\n", context_.rank,
                   status.ToString().c_str());
    }
  }
  rings_.clear();
  return absl::OkStatus();
}

}  // namespace rdmaflow::strategies::moshpit
