// File: job.cc
#include "sim/internal/job.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"

namespace rdmaflow::sim::internal {

namespace {

// In [0, high] and not NaN: values read from a profile file.
bool Bounded(double v, double high) { return v >= 0 && v <= high; }

// The host's time-sharing slowdown at `ranks_per_core`, interpolated
// between its measured points (1 at one rank a core).
double TimeSharingSlowdown(const HostProfile& host, double ranks_per_core) {
  double below_ratio = 1, below_slowdown = 1;
  for (const TimeSharing& point : host.time_sharing()) {
    if (ranks_per_core <= point.ranks_per_core()) {
      const double span = point.ranks_per_core() - below_ratio;
      const double at = span > 0 ? (ranks_per_core - below_ratio) / span : 1;
      return below_slowdown + std::max(0.0, at) * (point.slowdown() - below_slowdown);
    }
    below_ratio = point.ranks_per_core();
    below_slowdown = point.slowdown();
  }
  return below_slowdown;
}

}  // namespace

absl::StatusOr<Costs> CostsOf(const ModelProfile& model) {
  if (model.layers().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the profile of model '", model.model(),
        "' has no layers; measure it with tools/calibrate_sim.sh"));
  }
  if (model.batch_size() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the profile of model '", model.model(), "' has batch size ",
        model.batch_size(), "; it must be positive"));
  }
  Costs c;
  c.batch = model.batch_size();
  for (const LayerProfile& layer : model.layers()) {
    if (!(Bounded(layer.forward_ms(), 1e9) && Bounded(layer.backward_ms(), 1e9) &&
          Bounded(layer.param_bytes(), 1e15) && Bounded(layer.output_bytes(), 1e15))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layer '", layer.name(), "' of model '", model.model(),
          "' has a time or size that is negative, not finite or absurdly large"));
    }
    if (layer.head()) {
      c.head_forward += layer.forward_ms() * 1e-3;
      c.head_backward += layer.backward_ms() * 1e-3;
      c.head_param_bytes += layer.param_bytes();
    } else {
      c.features_forward += layer.forward_ms() * 1e-3;
      c.features_backward += layer.backward_ms() * 1e-3;
      c.features_param_bytes += layer.param_bytes();
      c.activation_bytes = layer.output_bytes();
    }
    if (layer.param_bytes() > 0) c.tensor_bytes.push_back(layer.param_bytes());
    c.layer_backward.push_back(layer.backward_ms() * 1e-3);
    c.layer_param_bytes.push_back(layer.param_bytes());
    c.layer_head.push_back(layer.head());
  }
  if (!(Bounded(model.optimizer_ms(), 1e9) && Bounded(model.loss_ms(), 1e9) &&
        Bounded(model.step_ms(), 1e9))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", model.model(),
        "' has an optimizer, loss or step time that is negative, not finite or absurd"));
  }
  c.optimizer = model.optimizer_ms() * 1e-3;
  c.loss = model.loss_ms() * 1e-3;
  // Timed one by one, the parts carry each timing's overhead; the whole
  // step timed as one is the better total. Keep the parts' proportions and
  // the whole step's sum.
  const double parts = c.step();
  if (model.step_ms() > 0 && parts > 0) {
    const double scale = model.step_ms() * 1e-3 / parts;
    c.features_forward *= scale;
    c.features_backward *= scale;
    c.head_forward *= scale;
    c.head_backward *= scale;
    c.loss *= scale;
    for (double& seconds : c.layer_backward) seconds *= scale;
  }
  return c;
}

Job::Job(const Scenario& scenario, Costs costs)
    : scenario_(scenario),
      costs_(std::move(costs)),
      loop_(Topology{scenario.ranks, scenario.ranks_per_host, scenario.host.cores(),
                     scenario.shared_cores, scenario.network, scenario.local}),
      random_(scenario.seed),
      busy_(scenario.ranks, 0),
      is_waiting_(scenario.ranks, false),
      waiting_(scenario.shared_cores > 0 ? 1 : loop_.topology().hosts(), 0),
      waiting_progress_(scenario.ranks),
      serving_(scenario.ranks, 0),
      moving_(scenario.ranks, 0),
      counted_moving_(scenario.ranks, false),
      moving_pollers_(waiting_.size(), 0) {
  // Processes sharing one pool of cores.
  const Topology& t = loop_.topology();
  const double sharing =
      t.shared_cores > 0 ? scenario.ranks : std::min(scenario.ranks, scenario.ranks_per_host);
  const double ranks_per_core = sharing / std::max(1, t.pool_cores());
  slowdown_ = TimeSharingSlowdown(scenario.host, ranks_per_core);
  if (ranks_per_core > 1) {
    const LinkProfile& link = t.hosts() > 1 ? scenario.network : scenario.local;
    wait_cpu_ = link.wait_cpu();
    moving_cpu_ = std::max(wait_cpu_, link.moving_cpu());
  }
}

void Job::RecountMoving(int rank) {
  const bool polls = is_waiting_[rank] || serving_[rank] > 0;
  const bool counts = polls && moving_[rank] > 0;
  if (counts == counted_moving_[rank]) return;
  counted_moving_[rank] = counts;
  moving_pollers_[loop_.topology().core_pool(rank)] += counts ? 1 : -1;
}

double Job::TransferMoving(int from, int to, double bytes, EventLoop::Callback done) {
  ++moving_[from];
  ++moving_[to];
  RecountMoving(from);
  RecountMoving(to);
  return loop_.Transfer(from, to, bytes, [this, from, to, done = std::move(done)] {
    --moving_[from];
    --moving_[to];
    RecountMoving(from);
    RecountMoving(to);
    done();
  });
}

void Job::StopWaiting(int rank) {
  if (!is_waiting_[rank]) return;
  is_waiting_[rank] = false;
  // A rank whose communication thread serves still has one poller.
  if (serving_[rank] == 0) --waiting_[loop_.topology().core_pool(rank)];
  RecountMoving(rank);
}

void Job::BeginBusy(int rank) {
  ++busy_[rank];
  StopWaiting(rank);
}

void Job::Leave(int rank) { StopWaiting(rank); }

double Job::Slowdown(int rank) const {
  const Topology& t = loop_.topology();
  const int pool = t.core_pool(rank);
  const double polling =
      wait_cpu_ * waiting_[pool] + (moving_cpu_ - wait_cpu_) * moving_pollers_[pool];
  return slowdown_ * (1 + polling / std::max(1, t.pool_cores()));
}

void Job::Busy(int rank, double seconds, EventLoop::Callback done) {
  BeginBusy(rank);
  loop_.Compute(rank, seconds * Slowdown(rank),
                [this, rank, done = std::move(done)] { EndBusy(rank, done); });
}

void Job::EndBusy(int rank, const EventLoop::Callback& done) {
  --busy_[rank];
  done();
  // What `done` started keeps it busy; else it waits (and progresses) now.
  if (busy_[rank] > 0) return;
  is_waiting_[rank] = true;
  // One poller a rank: its thread, or (serving) its communication thread.
  if (serving_[rank] == 0) ++waiting_[loop_.topology().core_pool(rank)];
  RecountMoving(rank);
  if (waiting_progress_[rank].empty()) return;
  std::vector<EventLoop::Callback> waiting = std::move(waiting_progress_[rank]);
  waiting_progress_[rank].clear();
  for (auto& fn : waiting) fn();
}

void Job::Serve(int rank, bool on) {
  // The thread polls: a waiting rank's share of a core, counted once a
  // rank (a rank that waits for its own thread polls nothing).
  const int pool = loop_.topology().core_pool(rank);
  if (!on) {
    if (--serving_[rank] == 0 && !is_waiting_[rank]) --waiting_[pool];
    RecountMoving(rank);
    return;
  }
  if (serving_[rank]++ == 0 && !is_waiting_[rank]) ++waiting_[pool];
  RecountMoving(rank);
  if (waiting_progress_[rank].empty()) return;
  std::vector<EventLoop::Callback> waiting = std::move(waiting_progress_[rank]);
  waiting_progress_[rank].clear();
  for (auto& fn : waiting) fn();
}

void Job::WhenProgressing(int rank, EventLoop::Callback fn) {
  if (busy_[rank] == 0 || serving_[rank] > 0) {
    fn();
  } else {
    waiting_progress_[rank].push_back(std::move(fn));
  }
}

void Job::Work(int rank, double seconds, EventLoop::Callback done) {
  Busy(rank, seconds, std::move(done));
}

void Job::Compute(int rank, double seconds, EventLoop::Callback done) {
  if (scenario_.jitter > 0) {
    std::uniform_real_distribution<double> factor(1 - scenario_.jitter,
                                                  1 + scenario_.jitter);
    seconds *= factor(random_);
  }
  if (rank == scenario_.slow_rank && scenario_.slow_factor > 1) {
    // rdmaflow_train's straggler sleeps inside its compute: it does not
    // progress meanwhile.
    const double sleep = seconds * (scenario_.slow_factor - 1);
    BeginBusy(rank);
    loop_.Compute(rank, seconds * Slowdown(rank),
                  [this, rank, sleep, done = std::move(done)]() mutable {
                    loop_.After(sleep, [this, rank, done = std::move(done)] {
                      EndBusy(rank, done);
                    });
                  });
    return;
  }
  Busy(rank, seconds, std::move(done));
}

void Job::Read(int reader, int owner, double bytes, EventLoop::Callback done) {
  loop_.After(loop_.topology().LatencySeconds(reader, owner),
              [this, reader, owner, bytes, done = std::move(done)]() mutable {
                if (!NeedsProgress(reader, owner)) {
                  loop_.Transfer(owner, reader, bytes, std::move(done));
                  return;
                }
                Answer(reader, owner, bytes, std::move(done));
              });
}

void Job::Answer(int reader, int owner, double bytes, EventLoop::Callback done) {
  // The owner's progress takes the request (or finds the socket drained)
  // and hands the socket what it holds. Unmeasured, the whole answer then
  // crosses, but its end waits for the owner's next progress (what the
  // socket did not take before the owner went back to computing).
  WhenProgressing(owner, [this, reader, owner, bytes, done = std::move(done)]() mutable {
    const double unattended = loop_.topology().link(owner, reader).unattended_bytes();
    if (!(unattended > 0)) {
      TransferMoving(owner, reader, bytes, [this, owner, done = std::move(done)]() mutable {
        WhenProgressing(owner, std::move(done));
      });
      return;
    }
    const double handed = std::min(bytes, unattended);
    TransferMoving(owner, reader, handed,
                   [this, reader, owner, rest = bytes - handed, done = std::move(done)]() mutable {
                     if (rest > 0) {
                       Answer(reader, owner, rest, std::move(done));
                     } else {
                       done();
                     }
                   });
  });
}

double Job::SendData(int writer, int target, double bytes, EventLoop::Callback done) {
  const double arrival = TransferMoving(writer, target, bytes, std::move(done));
  double& stream = stream_arrival_[{writer, target}];
  stream = std::max(stream, arrival);
  return arrival;
}

void Job::Put(int writer, int target, double bytes, EventLoop::Callback done) {
  if (!NeedsProgress(writer, target)) {
    loop_.Transfer(writer, target, bytes, std::move(done));
    return;
  }
  SendData(writer, target, bytes, [this, target, done = std::move(done)]() mutable {
    WhenProgressing(target, std::move(done));
  });
}

void Job::Write(int writer, int target, double bytes, EventLoop::Callback done) {
  if (!NeedsProgress(writer, target)) {
    loop_.Transfer(writer, target, bytes, std::move(done));
    return;
  }
  // A notified write is the data's put, a flush, then the flag's put
  // (rdma/ucx/ucx_endpoint.cc). Over an emulated link the target's
  // progress places the data and answers the flush; the writer's progress
  // takes that answer and sends the flag; the target's progress places it.
  // A writer that computes after posting thus holds its own notification,
  // and its progress is mostly its next post: the flag then follows the
  // data it has since sent to that peer, on their connection (as measured:
  // docs/scale.md). The flag's 8 bytes hold no port.
  SendData(writer, target, bytes, [this, writer, target, done = std::move(done)]() mutable {
    WhenProgressing(target, [this, writer, target, done = std::move(done)]() mutable {
      loop_.After(loop_.topology().LatencySeconds(target, writer),
                  [this, writer, target, done = std::move(done)]() mutable {
                    WhenProgressing(writer, [this, writer, target,
                                             done = std::move(done)]() mutable {
                      const double flag = std::max(
                          now() + loop_.topology().LatencySeconds(writer, target),
                          stream_arrival_[{writer, target}]);
                      loop_.After(flag - now(), [this, target, done = std::move(done)]() mutable {
                        WhenProgressing(target, std::move(done));
                      });
                    });
                  });
    });
  });
}

void Job::AllReduce(const std::vector<int>& members, double bytes, int member,
                    std::function<void()> done) {
  (void)member;
  PendingCollective& pending = collectives_[members];
  pending.waiting.push_back(std::move(done));
  if (++pending.arrived < static_cast<int>(members.size())) return;
  // The tokens a shaped link saved since this group's last call (a first
  // call finds the bucket full).
  AllReduceShape shape = shape_;
  const double burst = scenario_.network.burst_bytes();
  if (burst > 0) {
    auto last = last_call_end_.find(members);
    const double idle = last == last_call_end_.end() ? 1e300 : now() - last->second;
    shape.burst_tokens =
        std::min(burst, idle * std::max(scenario_.network.bandwidth_gbps(), 1e-9) * 1e9);
  }
  const AllReduceCost cost =
      AllReduceTime(loop_.topology(), scenario_.host, members, bytes, shape);
  loop_.CountWireBytes(cost.wire_bytes);
  last_call_end_[members] = now() + cost.seconds;
  std::vector<std::function<void()>> waiting = std::move(pending.waiting);
  collectives_.erase(members);
  for (auto& fn : waiting) loop_.After(cost.seconds, std::move(fn));
}

double Job::CopySeconds(double bytes) const {
  return bytes / (std::max(scenario_.host.memcpy_gbps(), 1e-9) * 1e9);
}

double Job::ReduceSeconds(double bytes) const {
  return bytes / (std::max(scenario_.host.reduce_gbps(), 1e-9) * 1e9);
}

double Job::StoreRoundTrip() const {
  // The store's own round trip (measured on one host), and across hosts
  // the network's there and back.
  const double crossing =
      loop_.topology().hosts() > 1 ? 2 * scenario_.network.latency_us() : 0;
  return (scenario_.host.store_round_trip_us() + crossing) * 1e-6;
}

SimulatedRun Job::Result(double samples_per_step) const {
  SimulatedRun run;
  run.set_model(scenario_.model.model());
  run.set_strategy(scenario_.strategy);
  std::string params;
  for (const auto& [key, value] : scenario_.params) {
    absl::StrAppend(&params, params.empty() ? "" : ",", key, "=", value);
  }
  run.set_params(params);
  run.set_link(scenario_.network.name());
  run.set_ranks(scenario_.ranks);
  run.set_ranks_per_host(scenario_.ranks_per_host);
  run.set_steps(scenario_.steps);
  run.set_slow_rank(scenario_.slow_rank);
  run.set_slow_factor(scenario_.slow_factor);
  const int steps = std::max(1, log_.steps);
  const double span = std::max(0.0, log_.last_end - std::max(0.0, log_.first_start));
  run.set_step_ms(span / steps * 1e3);
  run.set_comm_ms(log_.comm / steps * 1e3);
  run.set_wait_ms(log_.wait / steps * 1e3);
  run.set_wire_bytes_per_step(loop_.wire_bytes() / std::max(1, scenario_.steps));
  run.set_samples_per_s(span > 0 ? samples_per_step * steps / span : 0);
  run.set_update_rule(update_rule_);
  run.set_workers(static_cast<int32_t>(
      std::lround(samples_per_step / std::max(1, costs_.batch))));
  return run;
}

}  // namespace rdmaflow::sim::internal
