// File: job.h
// -----------------------------------------------------------------------------
// What every strategy model shares: the event loop, the model's compute
// costs, the straggler and jitter, and the reporting rank's step log.
// Internal to sim/ (simulate.cc and the *_model.cc files).
#ifndef RDMAFLOW_SIM_INTERNAL_JOB_H_
#define RDMAFLOW_SIM_INTERNAL_JOB_H_

#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/key_value_params.h"
#include "sim/collective_time.h"
#include "sim/event_loop.h"
#include "sim/scenario.h"
#include "sim/sim.pb.h"

namespace rdmaflow::sim::internal {

// A model's compute on one batch, in seconds, and its bytes.
struct Costs {
  double features_forward = 0, features_backward = 0;
  double head_forward = 0, head_backward = 0;
  double loss = 0, optimizer = 0;
  double features_param_bytes = 0, head_param_bytes = 0;
  double activation_bytes = 0;  // the features' output, one batch
  int batch = 0;
  std::vector<double> tensor_bytes;  // each layer's parameters (ps shards)
  // Every layer, in model order: its backward (seconds, scaled as the
  // parts are) and its parameters' bytes (ps overlap's slices).
  std::vector<double> layer_backward;
  std::vector<double> layer_param_bytes;
  std::vector<bool> layer_head;  // the layer is in the model's head

  double param_bytes() const { return features_param_bytes + head_param_bytes; }
  // Forward, loss and backward of the whole model: a worker's compute.
  double step() const {
    return features_forward + features_backward + head_forward + head_backward + loss;
  }
};

// kInvalidArgument for a profile without layers or with negative times.
absl::StatusOr<Costs> CostsOf(const ModelProfile& model);

// The reporting rank's steps, as rdmaflow_train measures them.
struct StepLog {
  double first_start = -1;
  double last_end = 0;
  int steps = 0;
  double comm = 0, wait = 0;

  void Start(double now) {
    if (first_start < 0) first_start = now;
  }
  void End(double now) {
    last_end = now;
    ++steps;
  }
};

// Single-threaded.
class Job {
 public:
  Job(const Scenario& scenario, Costs costs);

  const Scenario& scenario() const { return scenario_; }
  const Costs& costs() const { return costs_; }
  EventLoop& loop() { return loop_; }
  double now() const { return loop_.now(); }
  int ranks() const { return scenario_.ranks; }
  int steps() const { return scenario_.steps; }
  bool alive(int rank, int step) const {
    return !(rank == scenario_.kill_rank && step >= scenario_.kill_step);
  }

  // `seconds` of `rank`'s compute on its host's cores, with jitter and the
  // host's time-sharing slowdown; a straggler then sleeps (slow_factor - 1)
  // times what it computed.
  void Compute(int rank, double seconds, EventLoop::Callback done);
  // Work that is not the model's (copies, reductions, optimizer): cores and
  // the time-sharing slowdown, no jitter, no straggler.
  void Work(int rank, double seconds, EventLoop::Callback done);
  // A one-sided read of `bytes` of `owner`'s memory by `reader`: the
  // request's latency, then (once the owner progresses, on a link that
  // needs it) the data back.
  void Read(int reader, int owner, double bytes, EventLoop::Callback done);
  // A notified one-sided write of `bytes` into `target`'s memory; `done`
  // runs when its notification has landed. On a link that needs progress:
  // once the target placed the data, the writer progressed to send the
  // flag behind the flush, and the target placed the flag.
  void Write(int writer, int target, double bytes, EventLoop::Callback done);
  // A one-sided write without a notification (the writer flushes it
  // itself): `done` runs when it has landed, once the target progresses on
  // a link that needs it.
  void Put(int writer, int target, double bytes, EventLoop::Callback done);
  // Runs `fn` now if `rank` is progressing (not inside Compute or Work),
  // else when it next is. A rank in Compute or Work does not call its
  // transport's progress, so a peer's emulated read or write waits for it.
  void WhenProgressing(int rank, EventLoop::Callback fn);
  // `rank`'s communication thread holds its transport from Serve(rank,
  // true) to Serve(rank, false) (the strategies' overlap=on): the rank
  // progresses while it computes, and the thread's polling takes a waiting
  // rank's share of its cores.
  void Serve(int rank, bool on);
  // `rank` has left the job (its steps are done, or it was killed): it no
  // longer waits, so it takes no one's CPU.
  void Leave(int rank);
  // The all-reduce of `bytes` among `members`; `done` runs for each member
  // once the last has arrived and the collective has run.
  void AllReduce(const std::vector<int>& members, double bytes, int member,
                 std::function<void()> done);

  double CopySeconds(double bytes) const;
  double ReduceSeconds(double bytes) const;
  double StoreRoundTrip() const;
  AllReduceShape shape() const { return shape_; }
  void set_shape(const AllReduceShape& shape) { shape_ = shape; }

  // How the strategy updates the model (SimulatedRun.update_rule): each
  // model sets it from its parsed settings.
  void set_update_rule(std::string rule) { update_rule_ = std::move(rule); }

  StepLog& log() { return log_; }
  void set_reporter(int rank) { reporter_ = rank; }
  int reporter() const { return reporter_; }

  // The run's row (step, comm, wait from the log; wire bytes per step).
  SimulatedRun Result(double samples_per_step) const;

 private:
  struct PendingCollective {
    int arrived = 0;
    std::vector<std::function<void()>> waiting;
  };

  const Scenario scenario_;
  const Costs costs_;
  EventLoop loop_;
  std::mt19937_64 random_;
  AllReduceShape shape_;
  // Collectives in progress, by member list (one call at a time per group).
  std::map<std::vector<int>, PendingCollective> collectives_;
  // When each group's last collective ended (a shaper's tokens refill
  // between calls).
  std::map<std::vector<int>, double> last_call_end_;
  // When the last data each writer sent each target arrives (Write, Put):
  // a notification's flag travels behind it on their connection.
  std::map<std::pair<int, int>, double> stream_arrival_;
  // Runs `seconds` on `rank`'s cores, marking it busy (not progressing)
  // until `done` has run.
  void Busy(int rank, double seconds, EventLoop::Callback done);
  // Marks `rank` busy (no longer waiting).
  void BeginBusy(int rank);
  // What a compute of `rank` issued now is slowed by: time sharing, and the
  // ranks of its pool waiting now, each polling wait_cpu of a core, or
  // moving_cpu while data it sends or receives moves. (Fixed when issued: a
  // compute queued behind others does not see later waiters.)
  double Slowdown(int rank) const;
  void StopWaiting(int rank);
  // Runs `done`; then, unless it made `rank` busy again, what waited for
  // `rank` to progress.
  void EndBusy(int rank, const EventLoop::Callback& done);
  // The rest of a read's answer, `bytes` from `owner` to `reader` over a
  // link that needs progress: the owner hands its socket up to the link's
  // unattended_bytes at its next progress, which cross while it computes;
  // then the rest, at its next progress after they crossed. (Each handful
  // pays the link's latency again, where a socket streams on: at most
  // bytes / unattended_bytes latencies, a few per read as measured; a link
  // measured at the floor, kMinUnattendedBytes, pays one per page, about
  // 2,000 for an 8 MiB read: there the model overstates reads whose owner
  // is idle.)
  void Answer(int reader, int owner, double bytes, EventLoop::Callback done);
  // Sends `bytes` from writer to target and notes when they arrive on
  // their connection (stream_arrival_); returns that time.
  double SendData(int writer, int target, double bytes, EventLoop::Callback done);
  bool NeedsProgress(int a, int b) const {
    return loop_.topology().link(a, b).needs_target_progress();
  }

  StepLog log_;
  int reporter_ = 0;
  double slowdown_ = 1;
  // The fraction of a core a waiting rank uses, where ranks outnumber their
  // cores (else 0: a waiting rank then takes no one's core).
  double wait_cpu_ = 0;
  // The same for a rank that polls while data it sends or receives moves
  // (LinkProfile.moving_cpu; wait_cpu_ where not measured).
  double moving_cpu_ = 0;
  std::vector<int> busy_;  // by rank: Compute/Work calls not ended
  // By rank: it has been busy and is not now (it waits, polling).
  std::vector<bool> is_waiting_;
  std::vector<int> waiting_;  // by core pool: how many are
  std::vector<std::vector<EventLoop::Callback>> waiting_progress_;  // by rank
  std::vector<int> serving_;  // by rank: Serve(rank, true) calls not ended
  // By rank: transfers over a link that needs progress in flight from or
  // to it; whether it counts in moving_pollers_ (it polls while they move).
  std::vector<int> moving_;
  std::vector<bool> counted_moving_;
  std::vector<int> moving_pollers_;  // by core pool
  // Sets counted_moving_[rank] from the rank's state now.
  void RecountMoving(int rank);
  // A transfer from `from` to `to` over an emulated link: both move data
  // until `done` runs.
  double TransferMoving(int from, int to, double bytes, EventLoop::Callback done);
  std::string update_rule_;
};

// bucket_bytes=, chunk_bytes= and slots= of the strategies that all-reduce
// (allreduce, layer_separated), as they read them.
absl::Status ReadAllReduceShape(KeyValueParams& params, AllReduceShape* shape);

// The strategy models (one file each): each reads its settings from the
// scenario (kInvalidArgument naming a bad one), runs the loop to the end and
// returns the samples the job trains per step.
absl::StatusOr<double> RunParameterServer(Job& job);
absl::StatusOr<double> RunAllReduce(Job& job);
absl::StatusOr<double> RunLayerSeparated(Job& job);
absl::StatusOr<double> RunGossip(Job& job);
absl::StatusOr<double> RunMoshpit(Job& job);

}  // namespace rdmaflow::sim::internal

#endif  // RDMAFLOW_SIM_INTERNAL_JOB_H_
