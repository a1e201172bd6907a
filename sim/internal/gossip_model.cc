// File: gossip_model.cc
// -----------------------------------------------------------------------------
// Gossip as strategies/gossip runs it: every rank computes, applies local SGD,
// and every `period` steps mixes with one peer (the strategies' own
// PeerSelector picks it), never waiting for anyone:
//   pull: copy its parameters into its versioned buffer, read the peer's
//         (header, data, stamp: three one-sided reads), mix;
//   push: mix what its inbox holds, copy its parameters out, write them
//         into the peer's slot (stamp, data, stamp, each flushed: a round
//         trip each).
// A dead peer costs the reader a failed read (a round trip); it is skipped
// from then on.
// overlap=on (pull): the rank publishes, then its communication thread
// reads while the next step computes (the rank serves its peers' reads
// meanwhile); after that step's update it waits for the read if it has
// not landed, and mixes.
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/key_value_params.h"
#include "common/status_macros.h"
#include "sim/internal/background_exchange.h"
#include "sim/internal/job.h"
#include "strategies/gossip/peer_selector.h"

namespace rdmaflow::sim::internal {
namespace {

namespace gossip = strategies::gossip;

constexpr double kHeaderBytes = 64;
constexpr double kStampBytes = 8;

class GossipModel {
 public:
  GossipModel(Job& job, gossip::Topology topology, int period, bool push,
              uint64_t seed, bool overlap)
      : job_(job), period_(period), push_(push), overlap_(overlap), background_(job) {
    for (int r = 0; r < job.ranks(); ++r) {
      selectors_.push_back(
          std::make_unique<gossip::PeerSelector>(topology, r, job.ranks(), seed));
    }
    step_.assign(job.ranks(), 0);
    inbox_.assign(job.ranks(), 0);
    knows_dead_.assign(job.ranks(), false);
    if (job.scenario().kill_rank >= 0) {
      dead_mask_.assign(job.ranks(), false);
      dead_mask_[job.scenario().kill_rank] = true;
    }
  }

  void Start() {
    for (int r = 0; r < job_.ranks(); ++r) Step(r);
  }

 private:
  bool Gone(int r) const { return !job_.alive(r, step_[r]); }

  void Step(int r) {
    if (step_[r] >= job_.steps() || Gone(r)) {
      // A read in flight lands (and is mixed) before the rank leaves.
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
        if ((step_[r] + 1) % period_ == 0) {
          const double begin = job_.now();
          Exchange(r, [this, r, begin] {
            if (r == 0) job_.log().comm += job_.now() - begin;
            EndStep(r);
          });
        } else {
          EndStep(r);
        }
      });
    });
  }

  void EndStep(int r) {
    ++step_[r];
    if (r == 0) job_.log().End(job_.now());
    Step(r);
  }

  // overlap=on, after the update: waits for the read in flight, mixes what
  // landed, then publishes and starts the next read (when due).
  void AfterUpdateOverlapped(int r) {
    const double bytes = job_.costs().param_bytes();
    background_.AfterUpdate(
        r, job_.ReduceSeconds(bytes), (step_[r] + 1) % period_ == 0, job_.CopySeconds(bytes),
        [this, r](std::function<void(bool)> done) { ReadPeer(r, std::move(done)); },
        [this, r] { EndStep(r); });
  }

  // The next peer's parameters (header, data, stamp), read by the
  // communication thread: done(true), or done(false) when there is no peer.
  void ReadPeer(int r, std::function<void(bool)> done) {
    const int peer = selectors_[r]->Next(knows_dead_[r] ? dead_mask_ : std::vector<bool>{});
    if (peer < 0) {
      done(false);
      return;
    }
    if (Gone(peer)) {
      job_.Read(r, peer, kHeaderBytes, [this, r, done = std::move(done)]() mutable {
        knows_dead_[r] = true;
        ReadPeer(r, std::move(done));
      });
      return;
    }
    const double bytes = job_.costs().param_bytes();
    job_.Read(r, peer, kHeaderBytes, [this, r, peer, bytes, done] {
      job_.Read(r, peer, bytes, [this, r, peer, done] {
        job_.Read(r, peer, kStampBytes, [done] { done(true); });
      });
    });
  }

  void Exchange(int r, std::function<void()> done) {
    // Only the killed rank is ever gone; a rank skips it once it found out.
    const int peer = selectors_[r]->Next(knows_dead_[r] ? dead_mask_ : std::vector<bool>{});
    if (peer < 0) {
      done();
      return;
    }
    const double bytes = job_.costs().param_bytes();
    if (Gone(peer)) {
      // The failed access, then another peer.
      job_.Read(r, peer, kHeaderBytes, [this, r, peer, done = std::move(done)]() mutable {
        knows_dead_[r] = true;
        Exchange(r, std::move(done));
      });
      return;
    }
    if (!push_) {
      job_.Work(r, job_.CopySeconds(bytes), [this, r, peer, bytes, done] {
        job_.Read(r, peer, kHeaderBytes, [this, r, peer, bytes, done] {
          job_.Read(r, peer, bytes, [this, r, peer, bytes, done] {
            job_.Read(r, peer, kStampBytes, [this, r, bytes, done] {
              job_.Work(r, job_.ReduceSeconds(bytes), done);
            });
          });
        });
      });
      return;
    }
    const int messages = inbox_[r];
    inbox_[r] = 0;
    const double mix = messages * job_.ReduceSeconds(bytes) + job_.CopySeconds(bytes);
    job_.Work(r, mix, [this, r, peer, bytes, done] {
      WriteAndFlush(r, peer, kStampBytes, [this, r, peer, bytes, done] {
        WriteAndFlush(r, peer, bytes, [this, r, peer, done] {
          WriteAndFlush(r, peer, kStampBytes, [this, peer, done] {
            ++inbox_[peer];
            done();
          });
        });
      });
    });
  }

  // A write and its flush: the data there, then the acknowledgement back
  // (onesided/stamped_slot.cc: writes without a notification, flushed).
  void WriteAndFlush(int r, int peer, double bytes, std::function<void()> done) {
    job_.Put(r, peer, bytes, [this, r, peer, done = std::move(done)] {
      job_.loop().After(job_.loop().topology().LatencySeconds(peer, r), done);
    });
  }

  Job& job_;
  const int period_;
  const bool push_;
  const bool overlap_;
  BackgroundExchanges background_;  // overlap=on: the reads
  std::vector<std::unique_ptr<gossip::PeerSelector>> selectors_;
  std::vector<int> step_;
  std::vector<int> inbox_;  // messages not mixed yet (push)
  std::vector<bool> knows_dead_;  // by rank: it found the killed rank gone
  std::vector<bool> dead_mask_;   // by rank: the killed one
};

}  // namespace

absl::StatusOr<double> RunGossip(Job& job) {
  KeyValueParams params("gossip", job.scenario().params);
  double beta = 0.5;
  int period = 1;
  int copies = 3;
  int64_t seed = 1;
  std::string topology = "random", mode = "pull";
  RETURN_IF_ERROR(params.Real("beta", 1e-6, 1.0, &beta));
  RETURN_IF_ERROR(params.Int("period", 1, &period));
  RETURN_IF_ERROR(params.Choice("topology", {"random", "ring"}, &topology));
  RETURN_IF_ERROR(params.Choice("mode", {"pull", "push"}, &mode));
  RETURN_IF_ERROR(params.Int("copies", 2, &copies));
  RETURN_IF_ERROR(params.Int("seed", int64_t{0}, &seed));
  std::string overlap = "off";
  RETURN_IF_ERROR(params.Choice("overlap", {"off", "on"}, &overlap));
  RETURN_IF_ERROR(params.Done());
  if (job.ranks() < 2) return absl::InvalidArgumentError("gossip needs at least 2 ranks");
  if (overlap == "on" && mode == "push") {
    return absl::InvalidArgumentError("gossip overlap=on needs mode=pull");
  }
  ASSIGN_OR_RETURN(gossip::Topology parsed, gossip::ParseTopology(topology));
  // Overlap mixes one step later: another rule (its convergence is its own).
  job.set_update_rule(absl::StrCat("gossip:mode=", mode, ",period=", period,
                                   ",topology=", topology, ",beta=", beta,
                                   overlap == "on" ? ",overlap=on" : ""));
  GossipModel model(job, parsed, period, mode == "push", static_cast<uint64_t>(seed),
                    overlap == "on");
  model.Start();
  job.loop().Run();
  return static_cast<double>(job.ranks()) * job.costs().batch;
}

}  // namespace rdmaflow::sim::internal
