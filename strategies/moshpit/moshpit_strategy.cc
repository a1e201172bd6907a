// File: moshpit_strategy.cc
#include "strategies/moshpit/moshpit_strategy.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <utility>

#include "ATen/core/grad_mode.h"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "graph_analyzer/graph_builder.h"
#include "strategies/device_tensors.h"
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
  std::string overlap = "off";
  RETURN_IF_ERROR(params.Choice("overlap", {"off", "on"}, &overlap));
  RETURN_IF_ERROR(params.Done());
  moshpit.overlap = overlap == "on";
  RETURN_IF_ERROR(CheckTrainingOptions("moshpit", options.steps, options.learning_rate,
                                       options.momentum));
  moshpit.group_timeout = absl::Milliseconds(group_ms);
  moshpit.round_timeout = absl::Milliseconds(round_ms);
  return std::unique_ptr<MoshpitStrategy>(new MoshpitStrategy(options, moshpit));
}

absl::StatusOr<graph::GraphDef> MoshpitStrategy::DoPrepare(std::vector<Parameter> parameters) {
  const int world = context().world_size;
  ASSIGN_OR_RETURN(MoshpitGrid grid, MoshpitGrid::Create(world, moshpit_.side, moshpit_.dims));
  grid_ = std::make_unique<MoshpitGrid>(grid);
  RETURN_IF_ERROR(Adopt(std::move(parameters), 1));
  // Declared: each rank's flat parameters (the rounds' rings plan their
  // own slots).
  graph::GraphBuilder b("moshpit");
  b.SetWorldSize(world);
  for (int r = 0; r < world; ++r) {
    b.SetRank(r);
    b.Variable(absl::StrCat("r", r, "/params"), graph::DT_FLOAT32,
               {static_cast<int64_t>(replica_->bytes() / sizeof(float))});
  }
  return std::move(b).Build();
}

absl::Status MoshpitStrategy::DoStart() {
  if (context().rejoining) {
    RETURN_IF_ERROR(CatchUp());
    SkipTo(static_cast<int64_t>(round_) * period());
    adopt_next_average_ = true;
    std::fprintf(stderr, "moshpit rank %d: rejoining at round %d (step %lld)\n",
                 context().rank, round_, static_cast<long long>(round_) * period());
    return absl::OkStatus();
  }
  BuildGridRings();
  return absl::OkStatus();
}

void MoshpitStrategy::BuildGridRings() {
  const int rank = context().rank;
  for (int dim = 0; dim < grid_->dims(); ++dim) {
    // Round `dim` is the first to average along dimension `dim`.
    const std::vector<int> members = grid_->GroupOf(rank, dim);
    if (members.size() < 2) continue;
    const std::string ns = absl::StrCat(options().communicator_options.ns, "/moshpit/grid/",
                                        grid_->GroupKey(rank, dim));
    absl::StatusOr<collectives::AllReduceGroup*> ring = RingFor(members, -1 - dim, ns);
    if (!ring.ok()) {
      // The rounds build it when its members meet (the notes make sure no
      // member keeps a ring another lacks).
      std::fprintf(stderr,
                   "moshpit rank %d: building the ring of grid dimension %d before training "
                   "failed (%s); its first round builds one instead\n",
                   rank, dim, ring.status().ToString().c_str());
    }
  }
}

absl::Status MoshpitStrategy::CatchUp() {
  // A heartbeat counts the rounds a peer started: beat - 1 is the round it
  // is in. Jump to the most advanced peer's round when it is ahead of ours
  // (never past it: that would leave everyone alone, leapfrogging).
  rdma::Store& store = *context().store;
  const std::string beats = absl::StrCat(options().communicator_options.ns, "/moshpit/beat/");
  int64_t leader = -1;
  for (int peer = 0; peer < context().world_size; ++peer) {
    if (peer == context().rank) continue;
    ASSIGN_OR_RETURN(int64_t beat, store.Add(absl::StrCat(beats, peer), 0));
    // Written by a peer through the store: a round must fit ours (an int).
    if (beat < 0 || beat > std::numeric_limits<int>::max()) {
      return absl::DataLossError(absl::StrCat(
          "moshpit rank ", context().rank, ": the heartbeat of rank ", peer, " in the store is ",
          beat, ", not a round count; a peer wrote a bad heartbeat into the store"));
    }
    leader = std::max(leader, beat - 1);
  }
  if (leader <= round_) return absl::OkStatus();
  ASSIGN_OR_RETURN(int64_t mine, store.Add(absl::StrCat(beats, context().rank), 0));
  if (leader > mine) {
    RETURN_IF_ERROR(store.Add(absl::StrCat(beats, context().rank), leader - mine).status());
  }
  round_ = static_cast<int>(leader);
  return absl::OkStatus();
}

absl::Status MoshpitStrategy::Exchange() {
  if (!moshpit_.overlap) {
    absl::Status status = Round(replica_->flat());
    TakeRoundCounters();
    return status;
  }
  if (background_ == nullptr) {
    background_ = std::make_unique<CommunicationThread>(
        loop(), absl::StrCat("moshpit rank ", context().rank, "'s round"));
  }
  {
    // Allocated at the first round, copied into at the next ones.
    at::NoGradGuard no_grad;
    if (!snapshot_.defined()) {
      snapshot_ = replica_->flat().clone();
      averaged_ = snapshot_.clone();
    } else {
      snapshot_.copy_(replica_->flat());
      averaged_.copy_(snapshot_);
    }
  }
  // On a GPU the round's kernels run on a stream of their own, after these
  // copies, so that neither they nor the round's waits (for its own
  // stream) wait for the next step's forward and backward.
  if (side_ == nullptr) side_ = std::make_unique<SideStream>(averaged_.device());
  RETURN_IF_ERROR(side_->Mark());
  return background_->Start([this]() -> absl::Status {
    ASSIGN_OR_RETURN(std::unique_ptr<c10::StreamGuard> on_side, side_->Enter());
    // However the round ends (an error, a throw), nothing of it is left
    // queued on the side stream (after this, before the guard goes).
    absl::Cleanup drained = [this] {
      SynchronizeTorchStream(averaged_.device()).IgnoreError();
    };
    return Round(averaged_);
  });
}

absl::Status MoshpitStrategy::FinishExchange(StepReport& report) {
  if (background_ == nullptr || !background_->running()) return absl::OkStatus();
  const absl::Time begin = absl::Now();
  absl::Status status = background_->Stop();
  report.Add(StepSpan::Kind::kWait, begin, absl::Now());
  // Up to this wait: the step's own communication span covers the wait.
  report.Add(StepSpan::Kind::kCommunication, background_->work_begin(),
             std::min(background_->work_end(), begin));
  TakeRoundCounters();
  RETURN_IF_ERROR(status);
  at::NoGradGuard no_grad;
  replica_->flat().add_(averaged_.sub_(snapshot_));
  return absl::OkStatus();
}

void MoshpitStrategy::TakeRoundCounters() {
  counters_.bytes_sent += std::exchange(round_bytes_sent_, 0);
  counters_.tensors_sent += std::exchange(round_messages_, 0);
}

absl::Status MoshpitStrategy::Round(at::Tensor& theta) {
  absl::Status status = FormGroupAndAverage(theta);
  rounds_finished_.fetch_add(1, std::memory_order_release);
  return status;
}

absl::Status MoshpitStrategy::FormGroupAndAverage(at::Tensor& theta) {
  const int round = round_++;
  const int rank = context().rank;
  const std::string key = grid_->GroupKey(rank, round);
  const std::string ns =
      absl::StrCat(options().communicator_options.ns, "/moshpit/t", round, "/", key);
  // Every round bumps our heartbeat; a peer that missed a group is
  // suspected, not waited for, until its heartbeat moves again (it came
  // back), so a dead peer costs one group timeout, not one per round.
  rdma::Store& store = *context().store;
  const std::string beats = absl::StrCat(options().communicator_options.ns, "/moshpit/beat/");
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
  // The note lists the rounds our kept rings were created in: a ring is
  // reused only where every member still keeps it.
  ASSIGN_OR_RETURN(std::vector<GroupMember> group,
                   FormGroup(store, ns, rank, KeptRingsNote(), expected,
                             context().world_size, moshpit_.group_timeout));
  std::vector<int> members;
  for (const GroupMember& member : group) members.push_back(member.id);
  group_sizes_.push_back(static_cast<int>(members.size()));
  for (int peer : grid_group) {
    if (std::find(members.begin(), members.end(), peer) != members.end()) continue;
    ASSIGN_OR_RETURN(int64_t beat, store.Add(absl::StrCat(beats, peer), 0));
    Suspect(peer, beat);
  }
  if (members.size() < 2) return absl::OkStatus();
  DropRingUnlessAllKeep(group);
  absl::Status status = Average(members, round, ns, theta);
  if (!status.ok()) {
    // A member died in the round: keep training, try again next round.
    ++failed_rounds_;
    round_errors_.push_back(status);
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

std::string MoshpitStrategy::KeptRingsNote() const {
  std::vector<std::string> rounds;
  for (const auto& [members, kept] : rings_) rounds.push_back(absl::StrCat(kept.created));
  return absl::StrJoin(rounds, ",");
}

void MoshpitStrategy::DropRingUnlessAllKeep(const std::vector<GroupMember>& group) {
  std::vector<int> members;
  for (const GroupMember& member : group) members.push_back(member.id);
  auto it = rings_.find(members);
  if (it == rings_.end()) return;
  const std::string created = absl::StrCat(it->second.created);
  for (const GroupMember& member : group) {
    const std::vector<std::string> kept = absl::StrSplit(member.note, ',');
    if (std::find(kept.begin(), kept.end(), created) == kept.end()) {
      // A member dropped it (it suspected someone) or is a restarted
      // process: everyone sets up a new one this round.
      rings_.erase(it);
      return;
    }
  }
}

absl::StatusOr<collectives::AllReduceGroup*> MoshpitStrategy::RingFor(
    const std::vector<int>& members, int round, const std::string& ns) {
  if (auto it = rings_.find(members); it != rings_.end()) return it->second.ring.get();
  collectives::AllReduceGroupOptions ring_options;
  ring_options.ring.name = "avg";
  ring_options.ring.capacity_bytes = replica_->bytes() + sizeof(float);  // + the weight
  ring_options.ring.timeout = moshpit_.round_timeout;
  ring_options.ring.loop = &loop();
  ring_options.device = context().device;  // device parameters: a device region
  ASSIGN_OR_RETURN(std::unique_ptr<collectives::AllReduceGroup> ring,
                   collectives::AllReduceGroup::Create(*context().transport, *context().store,
                                                       ns, members, ring_options));
  ++rings_created_;
  if (ring->on_device()) ++device_rings_created_;
  collectives::AllReduceGroup* kept = ring.get();
  rings_[members] = KeptRing{std::move(ring), round};
  return kept;
}

absl::Status MoshpitStrategy::Average(const std::vector<int>& members, int round,
                                      const std::string& ns, at::Tensor& theta) {
  ASSIGN_OR_RETURN(collectives::AllReduceGroup * ring, RingFor(members, round, ns));
  const int64_t elements = static_cast<int64_t>(replica_->bytes() / sizeof(float));
  const collectives::RingAllReduceStats before = ring->stats();
  // [w theta, w], summed: the average is sum(w theta) / sum(w). Written
  // and read with torch's ops, on the replica's device (device parameters:
  // the ring's region is device memory there), and complete before the
  // ring's own device work reads them.
  at::NoGradGuard no_grad;
  const c10::Device where = theta.device();
  at::Tensor region = FloatsOver(ring->data(), elements + 1, where);
  at::Tensor sum = region.narrow(0, 0, elements);
  if (adopt_next_average_) {
    sum.zero_();
  } else {
    sum.copy_(theta);
  }
  region.narrow(0, elements, 1).fill_(adopt_next_average_ ? 0.0 : 1.0);
  // (This thread's stream only: with overlap=on another thread computes.)
  RETURN_IF_ERROR(SynchronizeTorchStream(where));
  RETURN_IF_ERROR(ring->AllReduce(0, elements + 1, collectives::DataType::kFloat32));
  const float total = region[elements].item<float>();
  if (total > 0) {
    theta.copy_(sum).div_(static_cast<double>(total));
    adopt_next_average_ = false;
  }
  // Nothing of torch's still reads the region once the round is over (a
  // ring may be dropped and its region freed), and the average is written
  // before another thread takes it (FinishExchange).
  RETURN_IF_ERROR(SynchronizeTorchStream(where));
  round_bytes_sent_ += ring->stats().bytes_sent - before.bytes_sent;
  round_messages_ += ring->stats().messages - before.messages;
  return absl::OkStatus();
}

absl::Status MoshpitStrategy::DoFinish(bool after_failure) {
  // A round still running (overlap=on) ends first, and its average lands
  // as without overlap; after a failure it is only ended.
  absl::Status last_round;
  if (after_failure && background_ != nullptr) {
    background_->Stop().IgnoreError();
    TakeRoundCounters();
  } else {
    StepReport unused;
    last_round = FinishExchange(unused);
  }
  // std::map order: every peer shuts its rings down in the same order, so
  // the shutdown barriers cannot wait on each other in a cycle.
  for (auto& [members, kept] : rings_) {
    // Members that left the ring (they suspected us) never come: wait no
    // longer than for a group.
    absl::Status status = kept.ring->Shutdown(moshpit_.group_timeout);
    if (!status.ok()) {
      std::fprintf(stderr, "moshpit rank %d: shutting a ring down: %s\n", context().rank,
                   status.ToString().c_str());
    }
  }
  rings_.clear();
  return last_round;
}

}  // namespace rdmaflow::strategies::moshpit
