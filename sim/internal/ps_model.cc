// File: ps_model.cc
// -----------------------------------------------------------------------------
// The parameter server as strategies/ps runs it. Ranks 0..S-1 serve shards
// (whole tensors, largest first onto the emptiest server); the others work.
// A worker's step:
//   1. permission: it polls every server's clock buffer (a versioned read:
//      header, data, stamp) until its clock is within the server's bound for
//      it and the server has taken its previous push; the bound comes from
//      the strategies' own ClockTable (bsp, asp, ssp, dssp);
//   2. pull: a versioned read of every shard, one server after another;
//   3. its previous push must have landed; compute (the straggler sleeps);
//   4. push: one write of each server's gradient shard, not waited for.
// A server takes one push at a time on its core: bsp adds it to the step's
// sum and applies the mean once every worker's is in; the other modes apply
// each as it comes. Then it republishes its clocks.
// overlap=on (slice_bytes=): ps_overlap_model.cc.
#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "sim/internal/job.h"
#include "sim/internal/ps_model.h"
#include "strategies/ps/ps_options.h"
#include "strategies/ps/sync_policy.h"

namespace rdmaflow::sim::internal {
namespace {

using strategies::ps::ClockTable;
using strategies::ps::SyncPolicy;

class ParameterServerModel {
 public:
  ParameterServerModel(Job& job, int servers, const SyncPolicy& policy)
      : job_(job), servers_(servers), workers_(job.ranks() - servers) {
    for (const std::vector<size_t>& shard : PsShardLayers(job.costs(), servers_)) {
      double bytes = 0;
      for (size_t i : shard) bytes += job.costs().layer_param_bytes[i];
      shard_bytes_.push_back(bytes);
    }
    for (int s = 0; s < servers_; ++s) {
      Server& server = servers_state_.emplace_back();
      server.table = std::make_unique<ClockTable>(policy, workers_);
    }
    bsp_ = policy.mode == strategies::ps::SyncMode::kBsp;
    worker_state_.resize(workers_);
    job.set_reporter(servers_);
  }

  void Start() {
    for (int w = 0; w < workers_; ++w) BeginStep(w);
  }

  double samples_per_step() const {
    return static_cast<double>(workers_) * job_.costs().batch;
  }

 private:
  struct Server {
    std::unique_ptr<ClockTable> table;
    std::vector<int> inbox;  // workers whose push has landed, in order
    bool busy = false;
    int taken_this_step = 0;
  };
  struct Worker {
    int step = 0;
    double step_start = 0;
    double wait_start = -1;  // waiting for permission since
    int pushes_in_flight = 0;
    std::function<void()> after_pushes;
  };

  int Rank(int w) const { return servers_ + w; }
  bool Reporting(int w) const { return w == 0; }
  double PollSeconds(int w, int s) const {
    const Topology& t = job_.loop().topology();
    return 3 * (2 * t.LatencySeconds(Rank(w), s) + t.PortSeconds(s, Rank(w), kHeaderBytes));
  }

  bool Permitted(int w) const {
    const int64_t clock = worker_state_[w].step;
    for (const Server& server : servers_state_) {
      if (server.table->clock(w) < clock) return false;  // read-my-writes
    }
    for (const Server& server : servers_state_) {
      if (clock > server.table->Bound(w)) return false;
    }
    return true;
  }

  void BeginStep(int w) {
    Worker& worker = worker_state_[w];
    if (worker.step >= job_.steps()) {
      job_.Leave(Rank(w));
      return;
    }
    worker.step_start = job_.now();
    if (Reporting(w)) job_.log().Start(job_.now());
    worker.wait_start = job_.now();
    CheckPermission(w);
  }

  // Called when the worker starts waiting and whenever a server republishes.
  void CheckPermission(int w) {
    Worker& worker = worker_state_[w];
    if (worker.wait_start < 0 || !Permitted(w)) return;
    const double waited_from = worker.wait_start;
    worker.wait_start = -1;
    double poll = 0;
    for (int s = 0; s < servers_; ++s) poll += PollSeconds(w, s);
    job_.loop().After(poll, [this, w, waited_from] {
      if (Reporting(w)) job_.log().wait += job_.now() - waited_from;
      Pull(w, 0);
    });
  }

  void Pull(int w, int s) {
    if (s == servers_) {
      AfterPull(w);
      return;
    }
    const int rank = Rank(w);
    job_.Read(rank, s, kHeaderBytes, [this, w, s, rank] {
      job_.Read(rank, s, shard_bytes_[s], [this, w, s, rank] {
        job_.Read(rank, s, kStampBytes, [this, w, s] { Pull(w, s + 1); });
      });
    });
  }

  void AfterPull(int w) {
    Worker& worker = worker_state_[w];
    auto compute = [this, w] {
      Worker& worker = worker_state_[w];
      if (Reporting(w)) job_.log().comm += job_.now() - worker.step_start;
      job_.Compute(Rank(w), job_.costs().step(), [this, w] { Push(w); });
    };
    if (worker.pushes_in_flight > 0) {
      worker.after_pushes = compute;
    } else {
      compute();
    }
  }

  void Push(int w) {
    Worker& worker = worker_state_[w];
    worker.pushes_in_flight = servers_;
    for (int s = 0; s < servers_; ++s) {
      job_.Write(Rank(w), s, shard_bytes_[s], [this, w, s] {
        Worker& worker = worker_state_[w];
        Arrive(s, w);
        if (--worker.pushes_in_flight == 0 && worker.after_pushes) {
          auto next = std::move(worker.after_pushes);
          worker.after_pushes = nullptr;
          next();
        }
      });
    }
    ++worker.step;
    if (Reporting(w)) job_.log().End(job_.now());
    BeginStep(w);
  }

  void Arrive(int s, int w) {
    servers_state_[s].inbox.push_back(w);
    Serve(s);
  }

  // The server takes the next push it may take.
  void Serve(int s) {
    Server& server = servers_state_[s];
    if (server.busy) return;
    auto next = server.inbox.begin();
    if (bsp_) {
      // A worker that already contributed waits until the step closes.
      const int64_t step_clock = server.table->min_clock();
      next = std::find_if(server.inbox.begin(), server.inbox.end(), [&](int w) {
        return server.table->clock(w) == step_clock;
      });
    }
    if (next == server.inbox.end()) return;
    const int w = *next;
    server.inbox.erase(next);
    server.busy = true;
    const double fraction = shard_bytes_[s] / std::max(1.0, job_.costs().param_bytes());
    const double apply = job_.costs().optimizer * fraction;
    const double add = job_.ReduceSeconds(shard_bytes_[s]);
    bool closes = true;
    if (bsp_) closes = ++server.taken_this_step == workers_;
    const double work = add + (closes ? apply : 0);
    job_.Work(s, work, [this, s, w, closes] {
      Server& server = servers_state_[s];
      const int64_t min_before = server.table->min_clock();
      server.table->OnPush(w, job_.now());
      if (bsp_ && closes) server.taken_this_step = 0;
      server.busy = false;
      // A bound moves for everyone only when the slowest clock moves; else
      // only `w`'s own clock (and DSSP extra) changed.
      if (server.table->min_clock() != min_before) {
        for (int other = 0; other < workers_; ++other) CheckPermission(other);
      } else {
        CheckPermission(w);
      }
      Serve(s);
    });
  }

  Job& job_;
  const int servers_;
  const int workers_;
  bool bsp_ = true;
  std::vector<double> shard_bytes_;
  std::vector<Server> servers_state_;
  std::vector<Worker> worker_state_;
};

}  // namespace

std::vector<std::vector<size_t>> PsShardLayers(const Costs& costs, int servers) {
  const std::vector<double>& bytes = costs.layer_param_bytes;
  std::vector<size_t> layers;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] > 0) layers.push_back(i);
  }
  std::stable_sort(layers.begin(), layers.end(),
                   [&](size_t a, size_t b) { return bytes[a] > bytes[b]; });
  std::vector<double> load(servers, 0);
  std::vector<std::vector<size_t>> shards(servers);
  for (size_t i : layers) {
    const auto emptiest = std::min_element(load.begin(), load.end());
    *emptiest += bytes[i];
    shards[emptiest - load.begin()].push_back(i);
  }
  for (std::vector<size_t>& shard : shards) std::sort(shard.begin(), shard.end());
  return shards;
}

absl::StatusOr<double> RunParameterServer(Job& job) {
  // The strategy's own parse: the same settings, defaults and refusals.
  ASSIGN_OR_RETURN(const strategies::ps::PsOptions ps,
                   strategies::ps::PsOptions::Parse(job.scenario().params));
  if (!ps.pull_by_read) {
    return absl::InvalidArgumentError(
        "the simulator models ps with pull=read (one-sided pulls) only, not pull=send");
  }
  const int servers = ps.servers;
  const SyncPolicy& policy = ps.sync;
  if (servers >= job.ranks()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ps needs at least one worker: servers=", servers, " of ", job.ranks(),
        " ranks"));
  }
  if (static_cast<int>(job.costs().tensor_bytes.size()) < servers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ps shards whole tensors: model '", job.scenario().model.model(), "' has ",
        job.costs().tensor_bytes.size(), " layers with parameters, fewer than servers=",
        servers));
  }
  // bsp's updates are SGD's with or without overlap; an asynchronous mode
  // with overlap pulls each slice as soon as it may, so a worker mixes
  // slices of several versions: a rule of its own (its steps to accuracy
  // measured apart: docs/strategies.md).
  // A prefetched slice under an asynchronous mode holds fewer of the
  // others' updates than one pulled when the step begins: a rule of its own
  // too.
  job.set_update_rule(policy.mode == strategies::ps::SyncMode::kBsp
                          ? "sgd"
                          : absl::StrCat("ps:", policy.ToString(), ps.overlap ? ",overlap=on" : "",
                                         ps.prefetch ? ",prefetch=on" : ""));
  if (ps.overlap) {
    return RunParameterServerOverlapped(job, servers, policy,
                                        static_cast<double>(ps.slice_bytes), ps.prefetch);
  }
  ParameterServerModel model(job, servers, policy);
  model.Start();
  job.loop().Run();
  return model.samples_per_step();
}

}  // namespace rdmaflow::sim::internal
