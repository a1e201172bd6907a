// File: moshpit_strategy.h
// -----------------------------------------------------------------------------
// Moshpit All-Reduce ("moshpit", Ryabinin et al., NeurIPS 2021): every rank
// trains its replica with local SGD and, every `period` steps, averages
// within a small group that changes each round. Peers sit on an M^d grid
// (moshpit_grid.h); round t's group is the peers that share every
// coordinate except dimension t mod d, formed through the Store with
// per-round keys and a timeout (moshpit_group.h), so a missing or dead peer
// shrinks its group instead of stalling it (and, once it has missed a group,
// is not waited for again until its heartbeat shows it back). The group averages with the
// ring all-reduce (collectives/), created the first time a group has those
// members and kept for the next rounds with the same members (on a full grid
// each peer keeps d rings, one per dimension, and a round costs one store
// exchange plus one all-reduce). A ring whose all-reduce fails, or that
// holds a suspected peer, is dropped. On a full grid, d rounds give every
// peer the exact global average. A peer that starts fresh builds its d
// rings before the first step (dimension by dimension: the same order on
// every peer), so no round pays a ring's set-up unless its members change.
// A peer that died and was started again (StrategyContext::rejoining) reads
// the others' heartbeats, starts at the most advanced one's round (and
// the matching step), and
// averages with weight 0 the first time, adopting its group's parameters;
// the others expect it again as soon as its heartbeat moves. A peer that
// finds itself alone in a group it expected company in catches up the same
// way. Averages carry a weight element: sum(w theta) / sum(w).
// With overlap=on (issue 48) a round runs on a communication thread
// (communication_thread.h) during the next step's compute, on a snapshot
// of the parameters taken when it began; after that step's local update
// the replica moves by what the round changed the snapshot by:
// theta += average - snapshot (delayed averaging: the local progress made
// meanwhile is kept; a round that averaged nothing moves nothing). On a
// GPU the round's kernels run on a stream of their own (SideStream), after
// the snapshot's copies, and its waits are for that stream only, not for
// the step's forward and backward (but for a ring set up or dropped: its
// device memory's allocation or release waits for the device).
// Parameters: side (M, 2), dims (d, derived from the ranks), period (1),
// group_timeout_ms (2000), round_timeout_ms (10000): a group whose
// all-reduce fails (a member died in it) skips that round's average;
// overlap (off|on, off).
// See docs/strategies.md.
#ifndef RDMAFLOW_STRATEGIES_MOSHPIT_MOSHPIT_STRATEGY_H_
#define RDMAFLOW_STRATEGIES_MOSHPIT_MOSHPIT_STRATEGY_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/allreduce_group.h"
#include "strategies/communication_thread.h"
#include "strategies/device_tensors.h"
#include "strategies/local_sgd_strategy.h"
#include "strategies/moshpit/moshpit_grid.h"
#include "strategies/moshpit/moshpit_group.h"

namespace rdmaflow::strategies::moshpit {

struct MoshpitOptions {
  int side = 2;
  int dims = 0;  // derived
  int period = 1;
  absl::Duration group_timeout = absl::Seconds(2);
  absl::Duration round_timeout = absl::Seconds(10);
  bool overlap = false;
};

// Thread-compatible: one thread drives a rank's strategy.
class MoshpitStrategy final : public LocalSgdStrategy {
 public:
  static absl::StatusOr<std::unique_ptr<MoshpitStrategy>> Create(
      const StrategyOptions& options);

  std::string name() const override { return "moshpit"; }
  bool supports_rejoin() const override { return true; }
  // Its replica, rings and averages on the device (StrategyContext::device).
  bool takes_device_parameters() const override { return true; }

  // The size of the group of each round so far, and rounds whose average
  // failed (for tests and logs). With overlap=on, read these between
  // steps only after Finish(): a round may be running.
  const std::vector<int>& group_sizes() const { return group_sizes_; }
  int failed_rounds() const { return failed_rounds_; }
  // Why each failed round's average failed (the ring's error: a member
  // slower than round_timeout_ms is named, with the message it owed).
  const std::vector<absl::Status>& round_errors() const { return round_errors_; }
  // Rings created so far (kept rings are reused, not counted again).
  int rings_created() const { return rings_created_; }
  // Of those, the rings whose region was device memory (device
  // parameters).
  int device_rings_created() const { return device_rings_created_; }
  bool exchanges_on_device() const override { return device_rings_created_ > 0; }
  // Rounds that have ended (failed ones too), counted on the thread that
  // ran them: with overlap=on, tests watch them end during compute. Any
  // thread.
  int64_t rounds_finished() const { return rounds_finished_.load(std::memory_order_acquire); }

 private:
  MoshpitStrategy(StrategyOptions options, MoshpitOptions moshpit)
      : LocalSgdStrategy(std::move(options), moshpit.period), moshpit_(moshpit) {}
  absl::StatusOr<graph::GraphDef> DoPrepare(std::vector<Parameter> parameters) override;
  // A fresh peer builds its grid rings here (BuildGridRings); a rejoining
  // peer catches up with the others' round.
  absl::Status DoStart() override;
  // The ring of each of this peer's grid groups, kept as if created in
  // round -1 - dim. One that fails is logged and left to its first round.
  void BuildGridRings();
  // Shuts the kept rings down (in one order on every peer), waiting at most
  // the group timeout for each: a ring whose other members left it (they
  // suspected this peer) is logged and dropped. The same after a failed
  // step: the wait is bounded either way.
  absl::Status DoFinish(bool after_failure) override;
  // One round: form the group, average in it (overlap=on: on the
  // communication thread, in a snapshot).
  absl::Status Exchange() override;
  // The round itself, averaging `theta` in place, counted in
  // rounds_finished_.
  absl::Status Round(at::Tensor& theta);
  absl::Status FormGroupAndAverage(at::Tensor& theta);
  // overlap=on: ends the round Exchange() left running and moves the
  // replica by what it changed.
  absl::Status FinishExchange(StepReport& report) override;
  void TakeRoundCounters();
  // The kept ring for `members`, or a new one set up under `ns` in `round`.
  absl::StatusOr<collectives::AllReduceGroup*> RingFor(const std::vector<int>& members,
                                                      int round, const std::string& ns);
  // Averages `theta` within the group; its ring's counts go to
  // round_bytes_sent_ and round_messages_.
  absl::Status Average(const std::vector<int>& members, int round, const std::string& ns,
                       at::Tensor& theta);
  void Suspect(int peer, int64_t beat);
  // The rounds our kept rings were created in, "3,4" (the group note).
  std::string KeptRingsNote() const;
  // Drops our ring for this group unless every member's note keeps it.
  void DropRingUnlessAllKeep(const std::vector<GroupMember>& group);
  // Moves round_ (and this peer's heartbeat) to the round the most
  // advanced other peer is in, when that is ahead of ours.
  absl::Status CatchUp();

  const MoshpitOptions moshpit_;
  std::unique_ptr<MoshpitGrid> grid_;
  std::vector<int> group_sizes_;
  int failed_rounds_ = 0;
  std::vector<absl::Status> round_errors_;
  int round_ = 0;
  int rings_created_ = 0;
  int device_rings_created_ = 0;
  // A rejoining peer's first average counts with weight 0: it adopts its
  // group's parameters instead of pulling them toward its fresh ones.
  bool adopt_next_average_ = false;
  struct KeptRing {
    std::unique_ptr<collectives::AllReduceGroup> ring;
    int created = 0;  // the round (-1 - dim: built before training)
  };
  // Kept rings, by members.
  std::map<std::vector<int>, KeptRing> rings_;
  // Peers that missed a group, with their heartbeat count then.
  std::map<int, int64_t> suspected_;
  // What the rounds sent since TakeRoundCounters() added them to
  // counters_ (on the rank's thread, so that counters() never races a
  // running round).
  int64_t round_bytes_sent_ = 0;
  int64_t round_messages_ = 0;
  std::atomic<int64_t> rounds_finished_{0};
  // overlap=on: the parameters when the running round began, and the
  // round's copy of them (averaged in place); the thread is declared last,
  // so that it is joined before what it uses goes.
  at::Tensor snapshot_;
  at::Tensor averaged_;
  std::unique_ptr<SideStream> side_;  // the round's stream on a GPU
  std::unique_ptr<CommunicationThread> background_;
};

}  // namespace rdmaflow::strategies::moshpit

#endif  // RDMAFLOW_STRATEGIES_MOSHPIT_MOSHPIT_STRATEGY_H_
