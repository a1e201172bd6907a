// File: moshpit_model.cc
// -----------------------------------------------------------------------------
// Moshpit as strategies/moshpit runs it: local SGD, then every `period`
// steps one averaging round within the rank's group of the round (the
// strategies' own MoshpitGrid says who). A round:
//   1. through the rendezvous store: a heartbeat, a ticket and a member
//      record (three round trips); the last expected member seals at once
//      (three round trips), the others poll (two round trips each, with
//      sleeps of 20 us doubling to 1 ms) until the seal or group_timeout_ms;
//      each reads the group's size (the sealer knows it) and the other
//      members' records (a round trip each);
//   2. a member set the rank has no ring for (its grid groups' rings were
//      built before training; a new set appears only when membership
//      changes) builds its all-reduce group through the store (settings,
//      hosts, ring): the calibrated group_setup_ms;
//   3. copy the parameters in, all-reduce them with a weight, divide, copy
//      back.
// A dead member is waited for until the timeout once, then left out until
// it shows up again; a member that comes after its group sealed is alone.
// overlap=on: the rank copies a snapshot, and its communication thread runs
// the round while the next step computes (the rank serving its transport
// meanwhile); after that step's update it waits for the round if it has
// not ended, and adds what the round changed (one pass over the
// parameters).
#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/key_value_params.h"
#include "common/status_macros.h"
#include "sim/internal/background_exchange.h"
#include "sim/internal/job.h"
#include "strategies/moshpit/moshpit_grid.h"

namespace rdmaflow::sim::internal {
namespace {

using strategies::moshpit::MoshpitGrid;

constexpr double kFirstPollSeconds = 20e-6;
constexpr double kLastPollSeconds = 1e-3;

class MoshpitModel {
 public:
  MoshpitModel(Job& job, MoshpitGrid grid, int period, double group_timeout_s, bool overlap)
      : job_(job),
        grid_(grid),
        period_(period),
        timeout_(group_timeout_s),
        overlap_(overlap),
        background_(job) {
    step_.assign(job.ranks(), 0);
    round_.assign(job.ranks(), 0);
  }

  void Start() {
    // Each rank built its grid groups' rings before training.
    for (int r = 0; r < job_.ranks(); ++r) {
      for (int dim = 0; dim < grid_.dims(); ++dim) built_.insert({r, grid_.GroupOf(r, dim)});
    }
    for (int r = 0; r < job_.ranks(); ++r) Step(r);
  }

 private:
  struct Meeting {
    std::vector<int> expected;
    std::vector<int> present;
    std::vector<std::function<void(std::vector<int>)>> waiting;
    double first_arrival = 0;
    bool sealed = false;
  };

  bool Gone(int r) const { return !job_.alive(r, step_[r]); }
  double Rtt() const { return job_.StoreRoundTrip(); }

  void Step(int r) {
    if (step_[r] >= job_.steps() || Gone(r)) {
      // A round in flight ends (and lands) before the rank leaves.
      background_.Leave(r);
      return;
    }
    if (r == 0) job_.log().Start(job_.now());
    job_.Compute(r, job_.costs().step(), [this, r] {
      job_.Work(r, job_.costs().optimizer, [this, r] {
        if (overlap_) {
          AfterUpdateOverlapped(r);
          return;
        }
        if ((step_[r] + 1) % period_ != 0) {
          EndStep(r);
          return;
        }
        const double begin = job_.now();
        Round(r, [this, r, begin] {
          if (r == 0) job_.log().comm += job_.now() - begin;
          EndStep(r);
        });
      });
    });
  }

  // A round: the heartbeat, ticket and record, then the group's average.
  void Round(int r, std::function<void()> done) {
    job_.loop().After(3 * Rtt(), [this, r, done = std::move(done)] { Join(r, done); });
  }

  // overlap=on, after the update: waits for the round in flight, lands what
  // it changed (one pass), then takes the snapshot (two copies) and starts
  // the next round (when due).
  void AfterUpdateOverlapped(int r) {
    const double bytes = job_.costs().param_bytes();
    background_.AfterUpdate(
        r, job_.ReduceSeconds(bytes), (step_[r] + 1) % period_ == 0,
        2 * job_.CopySeconds(bytes),
        [this, r](std::function<void(bool)> done) {
          Round(r, [done = std::move(done)] { done(true); });
        },
        [this, r] { EndStep(r); });
  }

  void EndStep(int r) {
    ++step_[r];
    if (r == 0) job_.log().End(job_.now());
    Step(r);
  }

  void Join(int r, std::function<void()> done) {
    const int round = round_[r]++;
    // Its heartbeat moved: whoever suspected it expects it again.
    suspected_.erase(r);
    const std::string key = absl::StrCat(round, "/", grid_.GroupKey(r, round));
    if (Sealed(r, round, key)) {
      // Too late: the group sealed without it; it is alone this round.
      Average(r, {r}, std::move(done));
      return;
    }
    std::vector<int> expected;
    for (int peer : grid_.GroupOf(r, round)) {
      if (!suspected_.count(peer)) expected.push_back(peer);
    }
    Meeting& meeting = meetings_[key];
    if (meeting.present.empty()) {
      meeting.expected = expected;
      meeting.first_arrival = job_.now();
      // The deadline: the first member seals with whoever came.
      job_.loop().After(timeout_, [this, key] { Seal(key); });
    }
    meeting.present.push_back(r);
    meeting.waiting.push_back([this, r, done](std::vector<int> members) {
      Average(r, std::move(members), done);
    });
    if (meeting.present.size() >= meeting.expected.size()) Seal(key);
  }

  // Whether `r`'s group of `round` sealed without it: no meeting is open,
  // yet a peer of the group has joined it (a peer that joined round k went
  // through that meeting, which only a seal closes). No memory per round.
  bool Sealed(int r, int round, const std::string& key) const {
    if (meetings_.count(key)) return false;
    for (int peer : grid_.GroupOf(r, round)) {
      if (peer != r && round_[peer] > round) return true;
    }
    return false;
  }

  void Seal(const std::string& key) {
    auto it = meetings_.find(key);
    if (it == meetings_.end() || it->second.sealed) return;
    Meeting& meeting = it->second;
    meeting.sealed = true;
    for (int peer : meeting.expected) {
      if (std::find(meeting.present.begin(), meeting.present.end(), peer) ==
          meeting.present.end()) {
        suspected_.insert(peer);
      }
    }
    std::vector<int> members = meeting.present;
    std::sort(members.begin(), members.end());
    const double waited = job_.now() - meeting.first_arrival;
    // The sealer writes (three round trips) while the others reach their
    // next poll (a seal read; a read of the size waits for the write);
    // then everyone reads the size (the sealer knows it: one less) and the
    // other records.
    const double poll = std::clamp(waited / 2, kFirstPollSeconds, kLastPollSeconds);
    const double after =
        std::max(3 * Rtt(), poll / 2 + Rtt()) + members.size() * Rtt();
    auto waiting = std::move(meeting.waiting);
    meetings_.erase(it);
    for (auto& fn : waiting) {
      job_.loop().After(after, [fn = std::move(fn), members] { fn(members); });
    }
  }

  void Average(int r, std::vector<int> members, std::function<void()> finish) {
    const double bytes = job_.costs().param_bytes() + 4;
    if (members.size() <= 1) {
      finish();
      return;
    }
    double setup = 0;
    if (built_.insert({r, members}).second) {
      // As measured for two ranks (allreduce_bench's setup_ms).
      setup = job_.scenario().host.group_setup_ms() * 1e-3;
    }
    job_.loop().After(setup, [this, r, bytes, members, finish] {
      job_.Work(r, job_.CopySeconds(bytes), [this, r, bytes, members, finish] {
        job_.AllReduce(members, bytes, r, [this, r, bytes, finish] {
          job_.Work(r, job_.ReduceSeconds(bytes) + job_.CopySeconds(bytes), finish);
        });
      });
    });
  }

  Job& job_;
  const MoshpitGrid grid_;
  const int period_;
  const double timeout_;
  const bool overlap_;
  BackgroundExchanges background_;  // overlap=on: the rounds
  std::vector<int> step_;
  std::vector<int> round_;
  std::map<std::string, Meeting> meetings_;
  std::set<int> suspected_;
  // (rank, members) of the all-reduce groups each rank has built.
  std::set<std::pair<int, std::vector<int>>> built_;
};

}  // namespace

absl::StatusOr<double> RunMoshpit(Job& job) {
  KeyValueParams params("moshpit", job.scenario().params);
  int side = 2, dims = 0, period = 1;
  int64_t group_ms = 2000, round_ms = 10000;
  RETURN_IF_ERROR(params.Int("side", 2, &side));
  RETURN_IF_ERROR(params.Int("dims", 0, &dims));
  if (dims > 64) {
    return absl::InvalidArgumentError(absl::StrCat("moshpit dims must be at most 64, got ", dims));
  }
  RETURN_IF_ERROR(params.Int("period", 1, &period));
  RETURN_IF_ERROR(params.Int("group_timeout_ms", int64_t{1}, &group_ms));
  RETURN_IF_ERROR(params.Int("round_timeout_ms", int64_t{1}, &round_ms));
  std::string overlap = "off";
  RETURN_IF_ERROR(params.Choice("overlap", {"off", "on"}, &overlap));
  RETURN_IF_ERROR(params.Done());
  if (job.ranks() < 2) return absl::InvalidArgumentError("moshpit needs at least 2 ranks");
  ASSIGN_OR_RETURN(MoshpitGrid grid, MoshpitGrid::Create(job.ranks(), side, dims));
  // Overlap averages one step later: another rule.
  job.set_update_rule(absl::StrCat("moshpit:side=", side, ",period=", period,
                                   overlap == "on" ? ",overlap=on" : ""));
  MoshpitModel model(job, grid, period, group_ms * 1e-3, overlap == "on");
  model.Start();
  job.loop().Run();
  return static_cast<double>(job.ranks()) * job.costs().batch;
}

}  // namespace rdmaflow::sim::internal
