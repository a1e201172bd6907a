// File: ps_overlap_model.cc
// -----------------------------------------------------------------------------
// The parameter server with overlap=on, as strategies/ps runs it: each
// shard (whole layers' parameters, largest first onto the emptiest server,
// laid out in model order) cut into slices of slice_bytes (auto: as the
// strategy's AutoSliceBytes). A worker's step:
//   1. pulls each slice as soon as it may go into the step (under bsp once
//      the server applied every worker's slice of the step before;
//      otherwise once the worker's own slice is in and its clock is within
//      the bound): a read of the clock words, then a versioned read
//      (header, data, stamp), one slice after another, in push order;
//   2. computes forward and loss, then backward layer by layer from the
//      last; its communication thread pushes each slice, one at a time,
//      once backward has passed every layer the slice holds (the rank
//      serving its transport meanwhile);
//   3. the step ends once its last push has landed.
// With prefetch (bsp), the communication thread also pulls the next step's
// slices during this step: one beside each push (the bucket's work waits
// for both), and one after another while it waits for backward, each once
// every worker's slice of this step is applied; the next step pulls only
// the rest and first copies the prefetched ones into its parameters.
// A server takes one slice at a time on its core: under bsp it adds it to
// the slice's sum and applies the slice once every worker's is in; the
// other modes apply each on arrival. A worker's clock at a server moves
// once all its slices there are in (the ClockTable's bound).
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sim/internal/job.h"
#include "sim/internal/ps_model.h"
#include "strategies/ps/slices.h"
#include "strategies/ps/sync_policy.h"

namespace rdmaflow::sim::internal {
namespace {

using strategies::ps::ClockTable;
using strategies::ps::SyncPolicy;

// The slices' size for a shard of `shard_bytes`: `slice_bytes`, or where it
// is 0 (auto) the strategy's AutoSliceBytes.
double SliceSize(double slice_bytes, double shard_bytes) {
  return slice_bytes > 0 ? slice_bytes
                         : static_cast<double>(strategies::ps::AutoSliceBytes(
                               static_cast<int64_t>(std::ceil(shard_bytes))));
}

class OverlappedParameterServer {
 public:
  OverlappedParameterServer(Job& job, int servers, const SyncPolicy& policy,
                            double slice_bytes, bool prefetch)
      : job_(job), servers_(servers), workers_(job.ranks() - servers), prefetch_(prefetch) {
    const Costs& c = job.costs();
    const std::vector<std::vector<size_t>> shard = PsShardLayers(c, servers_);
    // When backward has passed layer i: the backward of layers i.. (it
    // runs from the last layer).
    std::vector<double> passed(c.layer_backward.size() + 1, 0);
    for (size_t i = c.layer_backward.size(); i-- > 0;) {
      passed[i] = passed[i + 1] + c.layer_backward[i];
    }
    for (int s = 0; s < servers_; ++s) {
      double offset = 0;
      std::vector<std::pair<double, size_t>> extent;  // (end offset, layer)
      for (size_t i : shard[s]) extent.push_back({offset += c.layer_param_bytes[i], i});
      const double size = SliceSize(slice_bytes, offset);
      for (double begin = 0; begin < offset; begin += size) {
        const double end = std::min(offset, begin + size);
        // Complete once backward passed the first layer it holds.
        size_t first = 0;
        while (extent[first].first <= begin) ++first;
        slices_.push_back({s, end - begin, passed[extent[first].second]});
      }
    }
    // Push order: as backward completes them.
    std::stable_sort(slices_.begin(), slices_.end(),
                     [](const Slice& a, const Slice& b) { return a.ready < b.ready; });
    held_.assign(slices_.size(), std::vector<int64_t>(workers_, 0));
    applied_.assign(slices_.size(), 0);
    for (int s = 0; s < servers_; ++s) {
      servers_state_.emplace_back().table = std::make_unique<ClockTable>(policy, workers_);
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
  struct Slice {
    int server = 0;
    double bytes = 0;
    double ready = 0;  // seconds into backward its gradients are complete
  };
  struct Arrival {
    int worker = 0;
    size_t slice = 0;
  };
  struct Server {
    std::unique_ptr<ClockTable> table;
    std::vector<Arrival> inbox;  // slices landed, in order
    bool busy = false;
  };
  struct Worker {
    int step = 0;
    double step_start = 0;
    bool pulling = false;  // in step 1 of its step
    bool reading = false;  // a pull in flight
    bool waited = false;   // its first pull of the step began
    std::vector<bool> pulled;
    size_t left = 0;
    size_t next_push = 0;
    size_t ready = 0;     // slices backward completed, in push order
    bool pushing = false;
    double backward = 0;  // seconds of backward computed
    bool computed = false;
    bool in_step = false;          // between its pulls and its step's end
    std::vector<bool> prefetched;  // prefetch: next step's slices pulled
    double prefetched_bytes = 0;   // the same, in bytes
  };

  int Rank(int w) const { return servers_ + w; }
  bool Reporting(int w) const { return w == 0; }

  // Whether slice k may go into worker w's current step.
  bool Permitted(int w, size_t k) const {
    const int64_t clock = worker_state_[w].step;
    if (held_[k][w] < clock) return false;  // read-my-writes
    if (bsp_) return *std::min_element(held_[k].begin(), held_[k].end()) >= clock;
    // Within every server's bound, as the worker reads them all.
    for (const Server& server : servers_state_) {
      if (clock > server.table->Bound(w)) return false;
    }
    return true;
  }

  // Whether slice k may go into worker w's next step (prefetch): under
  // bsp it holds every worker's gradients of this step; otherwise it holds
  // this worker's, and the next step is within every server's bound now.
  bool PermittedNext(int w, size_t k) const {
    const int64_t next = worker_state_[w].step + 1;
    if (bsp_) return *std::min_element(held_[k].begin(), held_[k].end()) >= next;
    if (held_[k][w] < next) return false;
    for (const Server& server : servers_state_) {
      if (next > server.table->Bound(w)) return false;
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
    worker.pulling = true;
    worker.waited = false;
    worker.pulled.assign(slices_.size(), false);
    worker.left = slices_.size();
    if (!worker.prefetched.empty()) {
      worker.pulled = worker.prefetched;
      worker.left = std::count(worker.pulled.begin(), worker.pulled.end(), false);
    }
    TryPull(w);
  }

  // Called when the worker may pull and whenever a server republishes.
  void TryPull(int w) {
    Worker& worker = worker_state_[w];
    if (!worker.pulling || worker.reading) return;
    if (worker.left == 0) {
      worker.pulling = false;
      if (!worker.waited && Reporting(w)) job_.log().wait += job_.now() - worker.step_start;
      // The prefetched slices, copied into the parameters.
      const double copy = worker.prefetched_bytes;
      worker.prefetched_bytes = 0;
      if (copy > 0) {
        job_.Work(Rank(w), job_.CopySeconds(copy), [this, w] { AfterPull(w); });
      } else {
        AfterPull(w);
      }
      return;
    }
    size_t k = 0;
    while (k < slices_.size() && (worker.pulled[k] || !Permitted(w, k))) ++k;
    if (k == slices_.size()) return;  // a server's next publication calls again
    if (!worker.waited) {
      worker.waited = true;
      if (Reporting(w)) job_.log().wait += job_.now() - worker.step_start;
    }
    worker.reading = true;
    const int rank = Rank(w);
    const int s = slices_[k].server;
    // The clock words, then the slice's versioned read.
    job_.Read(rank, s, kHeaderBytes, [this, w, k, s, rank] {
      job_.Read(rank, s, kHeaderBytes, [this, w, k, s, rank] {
        job_.Read(rank, s, slices_[k].bytes, [this, w, k, s, rank] {
          job_.Read(rank, s, kStampBytes, [this, w, k] {
            Worker& worker = worker_state_[w];
            worker.reading = false;
            worker.pulled[k] = true;
            --worker.left;
            TryPull(w);
          });
        });
      });
    });
  }

  void AfterPull(int w) {
    Worker& worker = worker_state_[w];
    if (Reporting(w)) job_.log().comm += job_.now() - worker.step_start;
    const Costs& c = job_.costs();
    worker.next_push = 0;
    worker.ready = 0;
    worker.backward = 0;
    worker.computed = false;
    worker.in_step = true;
    if (prefetch_) worker.prefetched.assign(slices_.size(), false);
    job_.Serve(Rank(w), true);  // the pipeline's thread, from compute's start
    job_.Compute(Rank(w), c.features_forward + c.head_forward + c.loss,
                 [this, w] { Backward(w); });
  }

  // Backward up to the next slice it completes; then that slice may go.
  void Backward(int w) {
    Worker& worker = worker_state_[w];
    while (worker.ready < slices_.size() && slices_[worker.ready].ready <= worker.backward) {
      ++worker.ready;
    }
    const double total = job_.costs().features_backward + job_.costs().head_backward;
    if (worker.ready == slices_.size() && worker.backward >= total) {
      worker.computed = true;
      Push(w);
      return;
    }
    Push(w);
    const double next = worker.ready < slices_.size() ? slices_[worker.ready].ready : total;
    const double seconds = next - worker.backward;
    job_.Compute(Rank(w), seconds, [this, w, next] {
      worker_state_[w].backward = next;
      Backward(w);
    });
  }

  // The communication thread: the next complete slice, one at a time
  // (with prefetch, one pull of the next step beside it), and with
  // prefetch, while it waits for backward, the next step's pulls; the step
  // ends once backward is done and the last slice landed.
  void Push(int w) {
    Worker& worker = worker_state_[w];
    if (!worker.in_step || worker.pushing) return;
    if (worker.next_push < worker.ready) {
      worker.pushing = true;
      // The bucket's work is done once its push and its pull are.
      auto parts = std::make_shared<int>(1);
      auto part_done = [this, w, parts] {
        if (--*parts > 0) return;
        worker_state_[w].pushing = false;
        Push(w);
      };
      PushNext(w, part_done);
      if (Prefetch(w, part_done)) ++*parts;
      return;
    }
    if (worker.next_push < slices_.size() || !worker.computed) {
      // Idle until backward completes a slice: a pull of the next step
      // if one may go (a server's publication calls again).
      if (!worker.computed) {
        worker.pushing = Prefetch(w, [this, w] {
          worker_state_[w].pushing = false;
          Push(w);
        });
      }
      return;  // backward calls again
    }
    worker.in_step = false;
    job_.Serve(Rank(w), false);
    ++worker.step;
    if (Reporting(w)) job_.log().End(job_.now());
    BeginStep(w);
  }

  // With prefetch: starts the pull of the first slice of the next step not
  // yet pulled, in push order, among those this worker pushed this step,
  // if every worker's slice of this step is applied (else none: the
  // strategy stops at the first one that is not); `done` runs once it is
  // in. False when none started.
  bool Prefetch(int w, EventLoop::Callback done) {
    Worker& worker = worker_state_[w];
    if (!prefetch_ || worker.step + 1 >= job_.steps()) return false;
    size_t k = 0;
    while (k < worker.next_push && worker.prefetched[k]) ++k;
    if (k == worker.next_push || !PermittedNext(w, k)) return false;
    worker.prefetched[k] = true;  // claimed: one pull of it
    const int rank = Rank(w);
    const int s = slices_[k].server;
    job_.Read(rank, s, kHeaderBytes, [this, w, k, s, rank, done = std::move(done)]() mutable {
      job_.Read(rank, s, kHeaderBytes, [this, w, k, s, rank, done = std::move(done)]() mutable {
        job_.Read(rank, s, slices_[k].bytes, [this, w, k, s, rank, done = std::move(done)]() mutable {
          job_.Read(rank, s, kStampBytes, [this, w, k, done = std::move(done)]() mutable {
            worker_state_[w].prefetched_bytes += slices_[k].bytes;
            done();
          });
        });
      });
    });
    return true;
  }

  void PushNext(int w, EventLoop::Callback then) {
    const size_t k = worker_state_[w].next_push++;
    const int s = slices_[k].server;
    const double begin = job_.now();
    job_.Write(Rank(w), s, slices_[k].bytes, [this, w, k, s, begin, then = std::move(then)] {
      // The strategy reports each push's span as communication.
      if (Reporting(w)) job_.log().comm += job_.now() - begin;
      servers_state_[s].inbox.push_back({w, k});
      Serve(s);
      then();
    });
  }

  // The server takes the next slice it may take.
  void Serve(int s) {
    Server& server = servers_state_[s];
    if (server.busy) return;
    // Under bsp a slice ahead of the others' (its worker's next step)
    // waits until the slice's step closes.
    auto next = std::find_if(server.inbox.begin(), server.inbox.end(), [&](const Arrival& a) {
      return !bsp_ || held_[a.slice][a.worker] == applied_[a.slice];
    });
    if (next == server.inbox.end()) return;
    const Arrival arrival = *next;
    server.inbox.erase(next);
    server.busy = true;
    const size_t k = arrival.slice;
    const int w = arrival.worker;
    bool closes = true;
    if (bsp_) {
      int in = 0;
      for (int64_t held : held_[k]) in += held > applied_[k] ? 1 : 0;
      closes = in + 1 == workers_;
    }
    const double fraction = slices_[k].bytes / std::max(1.0, job_.costs().param_bytes());
    const double work = job_.ReduceSeconds(slices_[k].bytes) +
                        (closes ? job_.costs().optimizer * fraction : 0);
    job_.Work(s, work, [this, s, w, k, closes] {
      Server& server = servers_state_[s];
      ++held_[k][w];
      if (bsp_ && closes) ++applied_[k];
      // The worker's clock here moves once all its slices here are in.
      bool complete = true;
      for (size_t j = 0; j < slices_.size(); ++j) {
        if (slices_[j].server == s && held_[j][w] <= server.table->clock(w)) complete = false;
      }
      if (complete) server.table->OnPush(w, job_.now());
      server.busy = false;
      for (int other = 0; other < workers_; ++other) {
        TryPull(other);
        Push(other);  // an idle communication thread may prefetch now
      }
      Serve(s);
    });
  }

  Job& job_;
  const int servers_;
  const int workers_;
  const bool prefetch_;
  bool bsp_ = true;
  std::vector<Slice> slices_;                // in push order
  std::vector<std::vector<int64_t>> held_;   // by slice, then worker: gradients in
  std::vector<int64_t> applied_;             // bsp, by slice: steps applied
  std::vector<Server> servers_state_;
  std::vector<Worker> worker_state_;
};

}  // namespace

absl::StatusOr<double> RunParameterServerOverlapped(Job& job, int servers,
                                                    const SyncPolicy& policy,
                                                    double slice_bytes, bool prefetch) {
  // As the strategy refuses it (strategies/ps/ps_strategy.cc).
  const Costs& c = job.costs();
  for (const std::vector<size_t>& shard : PsShardLayers(c, servers)) {
    double bytes = 0;
    for (size_t i : shard) bytes += c.layer_param_bytes[i];
    const double slices = std::ceil(bytes / SliceSize(slice_bytes, bytes));
    if (slices > static_cast<double>(strategies::ps::kMaxSlices)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ps slice_bytes=", slice_bytes, " cuts a shard of ", bytes, " bytes into ", slices,
          " slices, more than ", strategies::ps::kMaxSlices, ": use larger slices"));
    }
  }
  OverlappedParameterServer model(job, servers, policy, slice_bytes, prefetch);
  model.Start();
  job.loop().Run();
  return model.samples_per_step();
}

}  // namespace rdmaflow::sim::internal
