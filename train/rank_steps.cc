// File: rank_steps.cc
#include "train/rank_steps.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ATen/CPUGeneratorImpl.h"
#include "ATen/Parallel.h"
#include "ATen/core/grad_mode.h"
#include "ATen/ops/cross_entropy_loss.h"
#include "ATen/ops/from_blob.h"
#include "ATen/ops/randperm.h"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "device/runtime_factory.h"
#include "rdma/builtin_transports.h"
#include "rdma/rendezvous.h"
#include "strategies/builtin_strategies.h"
#include "strategies/strategy_registry.h"
#include "train/device_model.h"
#include "train/timeline_trace.h"

namespace rdmaflow::train {

// The training loop's data on a computing rank: batches from its shard of
// the data (every workers-th sample, reshuffled each epoch).
class Worker {
 public:
  // `on_device`: forward and backward there (--device), else on `model`;
  // it outlives the worker.
  Worker(const TrainConfig& config, Model& model, Dataset train, int index,
         int workers, DeviceModel* on_device)
      : config_(config), model_(model), train_(std::move(train)), on_device_(on_device) {
    for (int64_t i = index; i < train_.size(); i += workers) mine_.push_back(i);
    generator_ = at::detail::createCPUGenerator(config.seed * 1000 + index);
  }

  // The next batch of this worker's shard.
  strategies::Batch NextBatch() {
    if (cursor_ + config_.batch_size > static_cast<int64_t>(order_.size())) {
      Shuffle();
    }
    at::Tensor index = at::from_blob(order_.data() + cursor_,
                                           {config_.batch_size}, at::kLong);
    cursor_ += config_.batch_size;
    return {train_.images.index_select(0, index), train_.labels.index_select(0, index)};
  }

  absl::StatusOr<strategies::ComputeResult> Compute() {
    const strategies::Batch batch = NextBatch();
    const at::Tensor& x = batch.x;
    const at::Tensor& y = batch.y;
    if (on_device_ != nullptr) return on_device_->Compute(x, y);
    ASSIGN_OR_RETURN(at::Tensor logits, model_.Forward(x));
    at::Tensor loss;
    try {
      loss = at::cross_entropy_loss(logits, y);
      loss.backward();
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model ", model_.name, ": the loss or its backward pass failed: ", e.what()));
    }
    const double accuracy = logits.argmax(1).eq(y).to(at::kFloat).mean().item<double>();
    return strategies::ComputeResult{loss.item<double>(), accuracy,
                                     config_.batch_size};
  }

 private:
  void Shuffle() {
    at::Tensor perm = at::randperm(static_cast<int64_t>(mine_.size()),
                                         generator_, at::kLong);
    auto at = perm.accessor<int64_t, 1>();
    order_.resize(mine_.size());
    for (size_t i = 0; i < mine_.size(); ++i) order_[i] = mine_[at[i]];
    cursor_ = 0;
  }

  const TrainConfig& config_;
  Model& model_;
  Dataset train_;
  DeviceModel* on_device_;
  std::vector<int64_t> mine_;
  std::vector<int64_t> order_;
  int64_t cursor_ = 0;
  at::Generator generator_;
};

namespace {

absl::StatusOr<Dataset> LoadSplit(const TrainConfig& config,
                                  const std::string& split) {
  if (UsesSyntheticData(config)) {
    const int64_t n = split == "train" ? config.synthetic_samples
                                       : std::max<int64_t>(config.synthetic_samples / 6, 1000);
    return SyntheticDataset(n, config.seed, split, config.sample);
  }
  return LoadFashionMnist(
      config.data_dir.empty() ? kDefaultFashionMnistDir : config.data_dir, split);
}

// Accuracy of `model` on the first `limit` samples of `data` (all if <= 0).
absl::StatusOr<double> Evaluate(Model& model, const Dataset& data, int64_t limit) {
  at::NoGradGuard no_grad;
  const int64_t n = limit > 0 ? std::min(limit, data.size()) : data.size();
  int64_t correct = 0;
  for (int64_t begin = 0; begin < n; begin += 1000) {
    const int64_t end = std::min(begin + 1000, n);
    ASSIGN_OR_RETURN(at::Tensor logits, model.Forward(data.images.slice(0, begin, end)));
    correct += logits.argmax(1).eq(data.labels.slice(0, begin, end)).sum().item<int64_t>();
  }
  return static_cast<double>(correct) / n;
}

// The model's copy on --device.
absl::StatusOr<std::unique_ptr<DeviceModel>> DeviceCopy(const TrainConfig& config,
                                                        const Model& model) {
  return DeviceModel::Create(config.device, config.model, config.seed, config.sample, model);
}

// Evaluate() of the rank's model, brought up to date first where its
// parameters lived on the device.
absl::StatusOr<double> EvaluateRank(RankState& state, const Dataset& data, int64_t limit) {
  for (DeviceModel* copy : {state.compute_device.get(), state.split_device.get()}) {
    if (copy != nullptr && copy->resident()) RETURN_IF_ERROR(copy->CopyToHost());
  }
  return Evaluate(state.model, data, limit);
}

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

}  // namespace

RankState::RankState() = default;
RankState::~RankState() = default;

strategies::StrategyOptions StrategyOptionsOf(const TrainConfig& config) {
  strategies::StrategyOptions options;
  options.steps = config.steps;
  options.learning_rate = config.learning_rate;
  options.momentum = config.momentum;
  options.communicator = config.communicator;
  options.communicator_options.ns = "train";
  options.communicator_options.timeout = config.timeout;
  options.params = config.strategy_params;
  options.codec = config.codec;
  return options;
}

absl::StatusOr<std::unique_ptr<RankState>> SetUpRank(const TrainConfig& config, int rank,
                                                     int world_size, rdma::Store& store) {
  RETURN_IF_ERROR(ValidateTrainConfig(config, world_size));
  // Before any torch call (DeviceModel::Prepare says why).
  RETURN_IF_ERROR(DeviceModel::Prepare(config.device));
  at::set_num_threads(1);  // ranks share the machine's cores
  auto state = std::make_unique<RankState>();
  state->rank = rank;
  state->world_size = world_size;
  ASSIGN_OR_RETURN(state->transport, rdma::CreateBuiltinTransport(
                                         config.transport, config.transport_params, rank));
  ASSIGN_OR_RETURN(state->model, MakeModel(config.model, config.seed, config.sample));
  std::vector<strategies::Parameter> parameters = state->model.Parameters();
  strategies::StrategyRegistry registry;
  RETURN_IF_ERROR(strategies::RegisterBuiltinStrategies(registry));
  strategies::StrategyOptions options = StrategyOptionsOf(config);
  ASSIGN_OR_RETURN(state->strategy, registry.Create(config.strategy, options));
  if (state->strategy->runs_split() && !state->model.split_status.ok()) {
    // layer_separated and allreduce overlap=forward run the model's
    // features and head themselves.
    return absl::Status(state->model.split_status.code(),
                        absl::StrCat("--model ", config.model, ": --strategy ", config.strategy,
                                     " runs the model cut before its first fully connected "
                                     "layer: ",
                                     state->model.split_status.message()));
  }
  if (config.device != "cpu" && !config.stage_device_parameters &&
      state->strategy->takes_device_parameters()) {
    // The strategy keeps the device copy's own parameters in device
    // regions: the transport learns device memory (the fake device's for
    // mirror, whose tensors are the CPU's), and nothing is staged.
    ASSIGN_OR_RETURN(state->device_runtime,
                     device::CreateDeviceRuntime(config.device == "cuda" ? "cuda" : "fake"));
    absl::StatusOr<std::unique_ptr<rdma::device_path::DeviceTransport>> device_transport =
        rdma::device_path::DeviceTransport::Create(std::move(state->transport),
                                                   state->device_runtime.get());
    if (!device_transport.ok()) {
      return absl::Status(device_transport.status().code(),
                          absl::StrCat("--device ", config.device, ": the device transport on ",
                                       state->device_runtime->name(), ": ",
                                       device_transport.status().message(),
                                       " (--stage_device_parameters exchanges host memory "
                                       "instead)"));
    }
    state->device_transport = device_transport->get();
    state->transport = *std::move(device_transport);
    // A strategy that runs the model's halves itself (layer_separated,
    // allreduce overlap=forward) runs the copy's; the others compute
    // through the worker.
    std::unique_ptr<DeviceModel>& copy =
        state->strategy->runs_split() ? state->split_device : state->compute_device;
    ASSIGN_OR_RETURN(copy, DeviceCopy(config, state->model));
    ASSIGN_OR_RETURN(parameters, copy->Resident());
    if (state->split_device != nullptr) {
      ASSIGN_OR_RETURN(state->device_split, state->split_device->ResidentSplit());
    }
  }
  strategies::StrategyContext context{rank, world_size, state->transport.get(), &store};
  context.device = state->device_transport;
  context.batch_size = config.batch_size;
  context.rejoining = config.rejoining;
  context.split = &state->model.split;
  if (config.device != "cpu" && state->strategy->runs_split()) {
    // The strategy runs the model halves itself: on the device's copy
    // (its own parameters, where the strategy took them above).
    if (state->split_device == nullptr) {
      ASSIGN_OR_RETURN(state->split_device, DeviceCopy(config, state->model));
      ASSIGN_OR_RETURN(state->device_split, state->split_device->Split());
    }
    context.split = &state->device_split;
  }
  context.model = state->model.graph.get();
  const bool model_file = state->model.script != nullptr || state->model.program != nullptr;
  if (rank == 0 && model_file && !state->model.graph_status.ok()) {
    std::fprintf(stderr,
                 "rdmaflow_train: the analyzer could not import --model, so strategies "
                 "place it without a plan (ps shards by size): %s\n",
                 std::string(state->model.graph_status.message()).c_str());
  }
  RankState* held = state.get();  // outlives the strategy it holds
  context.next_batch = [held]() -> absl::StatusOr<strategies::Batch> {
    if (held->worker == nullptr) {
      return absl::FailedPreconditionError("this rank has no training data");
    }
    return held->worker->NextBatch();
  };
  RETURN_IF_ERROR(state->strategy->Prepare(context, parameters).status());
  // The plan the strategy runs: what the summary reports as its registered
  // memory and transfers.
  state->plan = state->strategy->plan();
  state->reporter = state->strategy->worker_index() == 0;
  return state;
}

absl::Status LoadRankData(const TrainConfig& config, RankState& state) {
  strategies::Strategy& strategy = *state.strategy;
  if (!strategy.computes()) return absl::OkStatus();
  ASSIGN_OR_RETURN(Dataset train, LoadSplit(config, "train"));
  // Every worker's shard (every workers-th sample) must fill a batch.
  const int64_t shard = train.size() / std::max(strategy.workers(), 1);
  if (shard < config.batch_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--batch_size ", config.batch_size, " is more than the ", shard,
        " training samples of each of the ", strategy.workers(), " workers' shards"));
  }
  if (state.reporter) {
    ASSIGN_OR_RETURN(state.test, LoadSplit(config, "test"));
  }
  if (config.device != "cpu" && strategy.needs_compute_fn() && state.compute_device == nullptr) {
    ASSIGN_OR_RETURN(state.compute_device, DeviceCopy(config, state.model));
  }
  state.worker = std::make_unique<Worker>(config, state.model, std::move(train),
                                          strategy.worker_index(), strategy.workers(),
                                          state.compute_device.get());
  return absl::OkStatus();
}

// Runs at least this long before a rising loss is reported, comparing the
// first step's loss with the mean of the last kLossWindow steps'.
constexpr int64_t kDivergenceCheckSteps = 20;
constexpr int kLossWindow = 5;

absl::StatusOr<LoopTotals> RunStepLoop(const TrainConfig& config, RankState& state) {
  strategies::Strategy& strategy = *state.strategy;
  const int rank = state.rank;
  RETURN_IF_ERROR(strategy.Start());

  std::unique_ptr<MetricsLog> log;
  if (!config.log_prefix.empty() && strategy.computes()) {
    ASSIGN_OR_RETURN(log, MetricsLog::Open(absl::StrCat(
                              config.log_prefix, ".rank", rank, ".csv")));
  }
  // Every rank's step timeline, written when the loop ends, also when it
  // fails (where it helps most), labelled by the rank's step count.
  std::optional<TimelineTrace> timeline;
  int64_t steps_taken = 0;
  if (!config.log_prefix.empty()) timeline.emplace(rank, strategy.role());
  absl::Cleanup write_timeline = [&] {
    if (!timeline.has_value()) return;
    const std::string path = absl::StrCat(config.log_prefix, ".rank", rank, ".timeline.json");
    if (absl::Status written = timeline->WriteFile(path); !written.ok()) {
      std::fprintf(stderr, "rank %d: the step timeline: %s\n", rank,
                   written.ToString().c_str());
    }
  };
  state.progress = std::make_unique<Progress>(
      absl::StrCat("rank ", rank, " (", strategy.role(), ")"), config.steps);
  const bool slow = rank == config.slow_rank && config.slow_factor > 1;
  strategies::ComputeFn compute = [&]() -> absl::StatusOr<strategies::ComputeResult> {
    const absl::Time begin = absl::Now();
    ASSIGN_OR_RETURN(strategies::ComputeResult result, state.worker->Compute());
    if (slow) {
      // A straggler: this rank's compute takes slow_factor times as long.
      std::this_thread::sleep_for(absl::ToChronoNanoseconds(
          (absl::Now() - begin) * (config.slow_factor - 1)));
    }
    return result;
  };

  LoopTotals totals;
  absl::Duration eval_time;
  // The last step's record, when it is evaluated after Finish().
  std::optional<StepRecord> finished_record;
  const absl::Time start = absl::Now();
  while (!strategy.done()) {
    if (rank == config.kill_rank && steps_taken == config.kill_step && !config.rejoining) {
      std::fprintf(stderr, "rank %d: killing itself before step %lld (--kill_rank)\n",
                   rank, static_cast<long long>(steps_taken));
      std::fflush(stderr);
      raise(SIGKILL);
    }
    const absl::Time step_begin = absl::Now();
    ASSIGN_OR_RETURN(strategies::StepReport report,
                     strategy.Step(strategy.computes() ? compute : nullptr));
    if (slow && !strategy.needs_compute_fn()) {
      // A rank that computes without `compute` (layer_separated's conv and
      // FC ranks run the model themselves; a ps server applies updates)
      // sleeps after its step instead, slow_factor - 1 times the compute it
      // reported, so its peers wait for it as for a slower machine. Never
      // longer than a peer would wait (a wall-clock jump, not a straggler).
      const absl::Duration lag = std::clamp(report.compute_time * (config.slow_factor - 1),
                                            absl::ZeroDuration(),
                                            config.timeout);
      std::this_thread::sleep_for(absl::ToChronoNanoseconds(lag));
    }
    const absl::Duration step_time = absl::Now() - step_begin;
    if (timeline.has_value()) timeline->Add(steps_taken, report.timeline);
    ++steps_taken;
    const bool evaluate = config.eval_every > 0 && (report.clock + 1) % config.eval_every == 0;
    // The last step's model is shared by Finish() anyway (Strategy::Finish):
    // its evaluation waits for that rather than sharing the model twice.
    const bool after_finish = evaluate && strategy.shares_model() && strategy.done();
    if (evaluate && strategy.shares_model() && !after_finish) {
      // Every rank, so that the reporter holds the whole model (not timed
      // as training, as the evaluation is not; it includes the wait for
      // the slowest rank to end this step, docs/strategies.md).
      const absl::Time share_begin = absl::Now();
      RETURN_IF_ERROR(strategy.ShareModel());
      eval_time += absl::Now() - share_begin;
    }
    if (!strategy.computes()) continue;
    ++totals.steps;
    totals.comm_time += report.comm_time;
    totals.wait_time += report.wait_time;
    const absl::Duration overlap = report.timeline.Overlap();
    totals.overlap_time += overlap;
    totals.last_loss = report.compute.loss;
    totals.losses.push_back(report.compute.loss);
    totals.step_ms.push_back(Ms(step_time));
    StepRecord record;
    record.step = report.clock;
    record.loss = report.compute.loss;
    record.batch_accuracy = report.compute.accuracy;
    record.samples_per_s = report.compute.samples /
                           std::max(1e-9, absl::ToDoubleSeconds(absl::Now() - step_begin));
    record.compute_ms = Ms(report.compute_time);
    record.comm_ms = Ms(report.comm_time);
    record.wait_ms = Ms(report.wait_time);
    record.overlap_ms = Ms(overlap);
    record.staleness = report.min_clock < 0 ? -1 : report.clock - report.min_clock;
    if (state.reporter && evaluate && !after_finish &&
        (strategy.holds_full_model() || strategy.shares_model())) {
      const absl::Time eval_begin = absl::Now();
      ASSIGN_OR_RETURN(record.test_accuracy,
                       EvaluateRank(state, state.test, config.eval_samples));
      eval_time += absl::Now() - eval_begin;
    }
    record.elapsed_s = absl::ToDoubleSeconds(absl::Now() - start - eval_time);
    if (after_finish) {
      finished_record = record;
    } else if (log != nullptr) {
      log->Add(record);
    }
    if (state.reporter && config.progress) {
      state.progress->Update(
          report.clock + 1,
          absl::StrFormat("loss %.3f acc %.2f %.0f samples/s comm %.2f ms", record.loss,
                          record.batch_accuracy, record.samples_per_s, record.comm_ms));
    }
  }
  totals.wall_s = absl::ToDoubleSeconds(absl::Now() - start - eval_time);
  RETURN_IF_ERROR(strategy.Finish());
  if (finished_record.has_value()) {
    if (state.reporter) {
      ASSIGN_OR_RETURN(finished_record->test_accuracy,
                       EvaluateRank(state, state.test, config.eval_samples));
    }
    if (log != nullptr) log->Add(*finished_record);
  }
  return totals;
}

namespace {

// Rank 0's last wait: until `others` ranks counted themselves out under
// train/exit/left (an Add of 0 answers at once; polled every millisecond).
absl::Status WaitForLeavers(rdma::Store& store, int others, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  int64_t left = 0;
  while (true) {
    ASSIGN_OR_RETURN(left, store.Add("train/exit/left", 0));
    if (left >= others) return absl::OkStatus();
    if (absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "rank 0 waited ", absl::FormatDuration(timeout), " for the other ranks to leave: ", left,
      " of ", others, " did (a rank that died after the exit barrier; its log says why)"));
}

}  // namespace

absl::StatusOr<TrainSummary> ReportRank(const TrainConfig& config, RankState& state,
                                        const LoopTotals& totals, rdma::Store& store) {
  const int world_size = state.world_size;
  // Every rank's traffic, for the reporter's summary.
  const runtime::TransferCounters counters = state.strategy->counters();
  RETURN_IF_ERROR(store.Set(absl::StrCat("train/wire/", state.rank),
                            absl::StrCat(counters.bytes_sent + counters.bytes_read)));
  int64_t wire = 0;
  const bool lost = config.kill_rank > 0 && !config.restart_killed;
  const int alive = world_size - (lost ? 1 : 0);
  if (state.reporter) {
    for (int r = 0; r < world_size; ++r) {
      if (lost && r == config.kill_rank) continue;
      ASSIGN_OR_RETURN(std::string bytes,
                       store.Get(absl::StrCat("train/wire/", r), config.timeout));
      int64_t value = 0;
      if (absl::SimpleAtoi(bytes, &value)) wire += value;
    }
  }
  // The peers' device regions mapped here are closed before the exit
  // barrier, after which each rank frees its own (the state's destruction):
  // CUDA leaves freeing memory another process still has open undefined.
  // Finish() ended every exchange, so nothing reads them any more. A rank
  // that cannot close them still meets the others (they would wait for it
  // otherwise), then fails.
  absl::Status closed;
  if (state.device_transport != nullptr) {
    closed = state.device_transport->CloseMappings(absl::Now() + config.timeout);
    if (!closed.ok()) {
      closed = absl::Status(
          closed.code(),
          absl::StrCat("rank ", state.rank, ": closing its mappings of the peers' device regions "
                       "at the end of the run (the peers then freed memory still mapped here): ",
                       closed.message()));
    }
  }
  // Rank 0 may host the store (torchrun without its agent, our netns
  // launches): nobody leaves before the reporter has read it, and rank 0
  // leaves last, once every other rank has had the barrier's answer (a
  // rank still asking when the store's process exits would fail).
  // A rank counts itself out whatever its barrier said, so rank 0 never
  // waits on one that gave up.
  absl::Status exit = rdma::Barrier(store, "train", "exit", alive, config.timeout);
  if (state.rank != 0) {
    absl::Status out = store.Add("train/exit/left", 1).status();
    if (exit.ok()) exit = out;
  } else if (exit.ok()) {
    exit = WaitForLeavers(store, alive - 1, config.timeout);
  }
  RETURN_IF_ERROR(exit);
  RETURN_IF_ERROR(closed);
  TrainSummary summary;
  if (!state.reporter) return summary;
  const int64_t steps = std::max<int64_t>(totals.steps, 1);
  summary.wire_bytes_per_step = static_cast<double>(wire) / steps;
  for (const plan::RankSummary& r : state.plan.rank()) {
    summary.plan_registered_bytes += static_cast<int64_t>(r.registered_bytes());
  }
  for (const plan::LinkRegion& link : state.plan.link()) {
    summary.plan_transfers += link.slot_size();
    for (const plan::TensorSlot& slot : link.slot()) {
      summary.plan_device_transfers += slot.memory() == graph::MEMORY_DEVICE;
    }
  }
  summary.reported = true;
  ASSIGN_OR_RETURN(summary.test_accuracy, EvaluateRank(state, state.test, 0));
  summary.final_loss = totals.last_loss;
  summary.wall_s = totals.wall_s;
  summary.mean_step_ms = 1000 * totals.wall_s / steps;
  // A run whose loss ended above the untrained model's (the first step's)
  // did not train: said once, with what to try (Stanza's pipeline diverged
  // at the default rate). The mean of the last few steps: one batch's loss
  // is noisy.
  if (totals.losses.size() >= static_cast<size_t>(kDivergenceCheckSteps)) {
    const double first = totals.losses.front();
    const double last =
        std::accumulate(totals.losses.end() - kLossWindow, totals.losses.end(), 0.0) /
        kLossWindow;
    if (!(last <= first)) {
      std::fprintf(stderr,
                   "rdmaflow_train: warning: the training loss went from %.4g (the first "
                   "step) to %.4g (the last %d steps' mean): the run diverged or did not "
                   "learn; try a smaller --lr (--lr %.3g; with overlap=on, half the rate that "
                   "trains without it: its gradients are a step old)\n",
                   first, last, kLossWindow, config.learning_rate);
    }
  }
  if (!totals.step_ms.empty()) {
    std::vector<double> sorted = totals.step_ms;
    auto middle = sorted.begin() + static_cast<ptrdiff_t>(sorted.size() / 2);
    std::nth_element(sorted.begin(), middle, sorted.end());
    summary.median_step_ms = *middle;
  }
  summary.mean_comm_ms = Ms(totals.comm_time) / steps;
  summary.mean_wait_ms = Ms(totals.wait_time) / steps;
  summary.mean_overlap_ms = Ms(totals.overlap_time) / steps;
  // The strategy's word: its exchanges ran in device regions.
  summary.device_resident = state.strategy->exchanges_on_device();
  if (state.worker != nullptr && state.compute_device != nullptr) {
    const DeviceModel::Times& device = state.compute_device->times();
    const double calls = static_cast<double>(std::max<int64_t>(device.calls, 1));
    summary.device_in_ms = Ms(device.in) / calls;
    summary.device_compute_ms = Ms(device.compute) / calls;
    summary.device_out_ms = Ms(device.out) / calls;
  }
  const compression::CompressionStats codec = state.strategy->compression();
  summary.encode_ms_per_step = Ms(codec.encode_time) / steps;
  summary.decode_ms_per_step = Ms(codec.decode_time) / steps;
  if (config.progress) {
    state.progress->Finish(absl::StrFormat("test accuracy %.4f, %.1f s, %.1f ms/step",
                                           summary.test_accuracy, totals.wall_s,
                                           summary.mean_step_ms));
  }
  return summary;
}

}  // namespace rdmaflow::train
