// File: trainer.cc
#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/local_job.h"
#include "common/status_macros.h"
#include "rdma/builtin_transports.h"
#include "rdma/rendezvous.h"
#include "rdma/transport_registry.h"
#include "runtime/communicator_factory.h"
#include "strategies/builtin_strategies.h"
#include "strategies/strategy_registry.h"
#include "train/fashion_mnist.h"
#include "train/metrics_log.h"
#include "train/models.h"

namespace rdmaflow::train {
namespace {

absl::StatusOr<Dataset> LoadSplit(const TrainConfig& config,
                                  const std::string& split) {
  if (config.synthetic) {
    const int64_t n = split == "train" ? config.synthetic_samples
                                       : std::max<int64_t>(config.synthetic_samples / 6, 1000);
    return SyntheticDataset(n, config.seed, split);
  }
  return LoadFashionMnist(
      config.data_dir.empty() ? kDefaultFashionMnistDir : config.data_dir, split);
}

// Accuracy of `model` on the first `limit` samples of `data` (all if <= 0).
double Evaluate(Model& model, const Dataset& data, int64_t limit) {
  torch::NoGradGuard no_grad;
  const int64_t n = limit > 0 ? std::min(limit, data.size()) : data.size();
  int64_t correct = 0;
  for (int64_t begin = 0; begin < n; begin += 1000) {
    const int64_t end = std::min(begin + 1000, n);
    torch::Tensor logits = model.forward(data.images.slice(0, begin, end));
    correct += logits.argmax(1).eq(data.labels.slice(0, begin, end)).sum().item<int64_t>();
  }
  return static_cast<double>(correct) / n;
}

// The training loop of a computing rank: batches from its shard of the data
// (every workers-th sample, reshuffled each epoch).
class Worker {
 public:
  Worker(const TrainConfig& config, Model& model, Dataset train, int index,
         int workers)
      : config_(config), model_(model), train_(std::move(train)) {
    for (int64_t i = index; i < train_.size(); i += workers) mine_.push_back(i);
    generator_ = at::detail::createCPUGenerator(config.seed * 1000 + index);
  }

  // The next batch of this worker's shard.
  strategies::Batch NextBatch() {
    if (cursor_ + config_.batch_size > static_cast<int64_t>(order_.size())) {
      Shuffle();
    }
    torch::Tensor index = torch::from_blob(order_.data() + cursor_,
                                           {config_.batch_size}, torch::kInt64);
    cursor_ += config_.batch_size;
    return {train_.images.index_select(0, index), train_.labels.index_select(0, index)};
  }

  absl::StatusOr<strategies::ComputeResult> Compute() {
    const strategies::Batch batch = NextBatch();
    const torch::Tensor& x = batch.x;
    const torch::Tensor& y = batch.y;
    torch::Tensor logits = model_.forward(x);
    torch::Tensor loss = torch::nn::functional::cross_entropy(logits, y);
    loss.backward();
    const double accuracy = logits.argmax(1).eq(y).to(torch::kFloat32).mean().item<double>();
    return strategies::ComputeResult{loss.item<double>(), accuracy,
                                     config_.batch_size};
  }

 private:
  void Shuffle() {
    torch::Tensor perm = torch::randperm(static_cast<int64_t>(mine_.size()),
                                         generator_, torch::kInt64);
    auto at = perm.accessor<int64_t, 1>();
    order_.resize(mine_.size());
    for (size_t i = 0; i < mine_.size(); ++i) order_[i] = mine_[at[i]];
    cursor_ = 0;
  }

  const TrainConfig& config_;
  Model& model_;
  Dataset train_;
  std::vector<int64_t> mine_;
  std::vector<int64_t> order_;
  int64_t cursor_ = 0;
  torch::Generator generator_;
};

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

// The strategy's options from the trainer's flags.
strategies::StrategyOptions StrategyOptionsOf(const TrainConfig& config) {
  strategies::StrategyOptions options;
  options.steps = config.steps;
  options.learning_rate = config.learning_rate;
  options.momentum = config.momentum;
  options.communicator = config.communicator;
  options.communicator_options.ns = "train";
  options.communicator_options.timeout = config.timeout;
  options.params = config.strategy_params;
  return options;
}

}  // namespace

absl::Status ValidateTrainConfig(const TrainConfig& config, int world_size) {
  auto invalid = [](auto&&... pieces) {
    return absl::InvalidArgumentError(absl::StrCat(pieces...));
  };
  if (world_size < 1) return invalid("a job of ", world_size, " ranks");
  if (config.steps < 1) return invalid("--steps must be at least 1, got ", config.steps);
  if (config.batch_size < 1 || config.batch_size > kMaxBatchSize) {
    return invalid("--batch_size must be in 1..", kMaxBatchSize, ", got ",
                   config.batch_size);
  }
  if (!std::isfinite(config.learning_rate) || config.learning_rate <= 0) {
    return invalid("--lr must be a finite number above 0, got ", config.learning_rate);
  }
  if (!(config.momentum >= 0 && config.momentum < 1)) {
    return invalid("--momentum must be in [0, 1), got ", config.momentum);
  }
  if (!(config.slow_factor >= 1 && config.slow_factor <= kMaxSlowFactor)) {
    return invalid("--slow_factor must be in 1..", kMaxSlowFactor, ", got ",
                   config.slow_factor);
  }
  if (config.slow_rank < -1 || config.slow_rank >= world_size) {
    return invalid("--slow_rank must be -1 (nobody) or a rank in 0..", world_size - 1,
                   ", got ", config.slow_rank);
  }
  if (config.kill_rank != -1 && (config.kill_rank < 1 || config.kill_rank >= world_size)) {
    return invalid("--kill_rank must be -1 (nobody) or a rank in 1..", world_size - 1,
                   " (rank 0 hosts the job's store), got ", config.kill_rank);
  }
  if (config.kill_rank != -1 && (config.kill_step < 0 || config.kill_step >= config.steps)) {
    return invalid("--kill_step must be in 0..", config.steps - 1,
                   " (a step the rank runs), got ", config.kill_step);
  }
  if (config.restart_killed && config.kill_rank == -1) {
    return invalid("--restart_killed needs --kill_rank and --kill_step");
  }
  if (config.eval_every < 0 || config.eval_samples < 0) {
    return invalid("--eval_every and --eval_samples must be >= 0, got ",
                   config.eval_every, " and ", config.eval_samples);
  }
  if (!std::isfinite(absl::ToDoubleSeconds(config.timeout)) ||
      config.timeout <= absl::ZeroDuration()) {
    return invalid("--timeout_s must be a finite number of seconds above 0, got ",
                   absl::FormatDuration(config.timeout));
  }
  if (config.synthetic) {
    if (config.synthetic_samples < 1 || config.synthetic_samples > kMaxSyntheticSamples) {
      return invalid("--synthetic_samples must be in 1..", kMaxSyntheticSamples, ", got ",
                     config.synthetic_samples);
    }
    // A batch for every rank's shard (at most every rank computes).
    if (config.synthetic_samples / world_size < config.batch_size) {
      return invalid("--synthetic_samples ", config.synthetic_samples,
                     " do not give each of ", world_size, " ranks a batch of ",
                     config.batch_size, " (--batch_size)");
    }
  } else {
    const std::string dir =
        config.data_dir.empty() ? kDefaultFashionMnistDir : config.data_dir;
    for (const char* file : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                             "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}) {
      const std::string path = absl::StrCat(dir, "/", file);
      if (!std::ifstream(path)) {
        return invalid("--data_dir: cannot read ", path,
                       "; install Debian's dataset-fashion-mnist, point --data_dir at the "
                       "idx files, or train on --synthetic data");
      }
    }
  }
  if (!config.log_prefix.empty()) {
    const std::filesystem::path parent =
        std::filesystem::path(config.log_prefix).parent_path();
    std::error_code error;
    if (!parent.empty() && !std::filesystem::is_directory(parent, error)) {
      return invalid("--log_prefix: ", parent.string(), " is not a directory");
    }
  }
  const std::vector<std::string> models = ModelNames();
  if (std::find(models.begin(), models.end(), config.model) == models.end()) {
    return invalid("--model '", config.model, "' is unknown; models: ",
                   absl::StrJoin(models, ", "));
  }
  const std::vector<std::string> communicators = runtime::CommunicatorNames();
  if (std::find(communicators.begin(), communicators.end(), config.communicator) ==
      communicators.end()) {
    return invalid("--communicator '", config.communicator, "' is unknown; communicators: ",
                   absl::StrJoin(communicators, ", "));
  }
  rdma::TransportRegistry transports;
  RETURN_IF_ERROR(rdma::RegisterBuiltinTransports(transports));
  const std::vector<std::string> transport_names = transports.Names();
  if (std::find(transport_names.begin(), transport_names.end(), config.transport) ==
      transport_names.end()) {
    return invalid("--transport '", config.transport, "' is unknown; transports: ",
                   absl::StrJoin(transport_names, ", "));
  }
  if (absl::Status params = rdma::ParseTransportParams(config.transport_params).status();
      !params.ok()) {
    return invalid("--transport_params: ", params.message());
  }
  // The strategy's factory checks its name and parameters (and steps, lr,
  // momentum); creating it starts nothing.
  strategies::StrategyRegistry registry;
  RETURN_IF_ERROR(strategies::RegisterBuiltinStrategies(registry));
  absl::StatusOr<std::unique_ptr<strategies::Strategy>> strategy =
      registry.Create(config.strategy, StrategyOptionsOf(config));
  if (!strategy.ok()) {
    return invalid("--strategy '", config.strategy, "': ", strategy.status().message());
  }
  if (config.restart_killed && !(*strategy)->supports_rejoin()) {
    return invalid("--restart_killed: strategy '", config.strategy,
                   "' cannot take a restarted rank back; it works with moshpit");
  }
  if (config.strategy == "ps" && config.strategy_params.count("servers") != 0) {
    int servers = 0;
    if (absl::SimpleAtoi(config.strategy_params.at("servers"), &servers) &&
        servers >= world_size) {
      return invalid("--servers ", servers, " leaves no worker among ", world_size,
                     " ranks (servers come first, then workers)");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainSummary> RunTrainingRank(const TrainConfig& config, int rank,
                                             int world_size, rdma::Store& store) {
  RETURN_IF_ERROR(ValidateTrainConfig(config, world_size));
  torch::set_num_threads(1);  // ranks share the machine's cores
  ASSIGN_OR_RETURN(auto transport, bench::MakeTransport(config.transport,
                                                        config.transport_params, rank));
  ASSIGN_OR_RETURN(Model model, MakeModel(config.model, config.seed));
  std::vector<strategies::Parameter> parameters;
  for (const auto& item : model.module->named_parameters()) {
    parameters.push_back({item.key(), item.value()});
  }
  strategies::StrategyRegistry registry;
  RETURN_IF_ERROR(strategies::RegisterBuiltinStrategies(registry));
  strategies::StrategyOptions options = StrategyOptionsOf(config);
  ASSIGN_OR_RETURN(auto strategy, registry.Create(config.strategy, options));
  std::unique_ptr<Worker> worker;
  strategies::StrategyContext context{rank, world_size, transport.get(), &store};
  context.batch_size = config.batch_size;
  context.rejoining = config.rejoining;
  context.split = &model.split;
  context.next_batch = [&worker]() -> absl::StatusOr<strategies::Batch> {
    if (worker == nullptr) {
      return absl::FailedPreconditionError("this rank has no training data");
    }
    return worker->NextBatch();
  };
  RETURN_IF_ERROR(strategy->Prepare(context, parameters).status());

  // Data before Start(): loading is not communication time.
  Dataset test;
  const bool reporter = strategy->worker_index() == 0;
  if (strategy->computes()) {
    ASSIGN_OR_RETURN(Dataset train, LoadSplit(config, "train"));
    // Every worker's shard (every workers-th sample) must fill a batch.
    const int64_t shard = train.size() / std::max(strategy->workers(), 1);
    if (shard < config.batch_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--batch_size ", config.batch_size, " is more than the ", shard,
          " training samples of each of the ", strategy->workers(), " workers' shards"));
    }
    if (reporter) {
      ASSIGN_OR_RETURN(test, LoadSplit(config, "test"));
    }
    worker = std::make_unique<Worker>(config, model, std::move(train),
                                      strategy->worker_index(), strategy->workers());
  }
  RETURN_IF_ERROR(strategy->Start());

  std::unique_ptr<MetricsLog> log;
  if (!config.log_prefix.empty() && strategy->computes()) {
    ASSIGN_OR_RETURN(log, MetricsLog::Open(absl::StrCat(
                              config.log_prefix, ".rank", rank, ".csv")));
  }
  Progress progress(absl::StrCat("rank ", rank, " (", strategy->role(), ")"),
                    config.steps);
  const bool slow = rank == config.slow_rank && config.slow_factor > 1;
  strategies::ComputeFn compute = [&]() -> absl::StatusOr<strategies::ComputeResult> {
    const absl::Time begin = absl::Now();
    ASSIGN_OR_RETURN(strategies::ComputeResult result, worker->Compute());
    if (slow) {
      // A straggler: this rank's compute takes slow_factor times as long.
      std::this_thread::sleep_for(absl::ToChronoNanoseconds(
          (absl::Now() - begin) * (config.slow_factor - 1)));
    }
    return result;
  };

  TrainSummary summary;
  absl::Duration eval_time;
  absl::Duration comm_total, wait_total;
  const absl::Time start = absl::Now();
  double last_loss = 0;
  int64_t steps = 0;
  while (!strategy->done()) {
    if (rank == config.kill_rank && steps == config.kill_step && !config.rejoining) {
      std::fprintf(stderr, "rank %d: killing itself before step %lld (--kill_rank)\n",
                   rank, static_cast<long long>(steps));
      std::fflush(stderr);
      raise(SIGKILL);
    }
    const absl::Time step_begin = absl::Now();
    ASSIGN_OR_RETURN(strategies::StepReport report,
                     strategy->Step(strategy->computes() ? compute : nullptr));
    if (!strategy->computes()) continue;
    ++steps;
    comm_total += report.comm_time;
    wait_total += report.wait_time;
    last_loss = report.compute.loss;
    StepRecord record;
    record.step = report.clock;
    record.loss = report.compute.loss;
    record.batch_accuracy = report.compute.accuracy;
    record.samples_per_s = report.compute.samples /
                           std::max(1e-9, absl::ToDoubleSeconds(absl::Now() - step_begin));
    record.compute_ms = Ms(report.compute_time);
    record.comm_ms = Ms(report.comm_time);
    record.wait_ms = Ms(report.wait_time);
    record.staleness = report.min_clock < 0 ? -1 : report.clock - report.min_clock;
    if (reporter && config.eval_every > 0 && strategy->holds_full_model() &&
        (report.clock + 1) % config.eval_every == 0) {
      const absl::Time eval_begin = absl::Now();
      record.test_accuracy = Evaluate(model, test, config.eval_samples);
      eval_time += absl::Now() - eval_begin;
    }
    record.elapsed_s = absl::ToDoubleSeconds(absl::Now() - start - eval_time);
    if (log != nullptr) log->Add(record);
    if (reporter && config.progress) {
      progress.Update(report.clock + 1,
                      absl::StrFormat("loss %.3f acc %.2f %.0f samples/s comm %.2f ms",
                                      record.loss, record.batch_accuracy,
                                      record.samples_per_s, record.comm_ms));
    }
  }
  const double wall_s = absl::ToDoubleSeconds(absl::Now() - start - eval_time);
  RETURN_IF_ERROR(strategy->Finish());
  // Every rank's traffic, for the reporter's summary.
  const runtime::TransferCounters counters = strategy->counters();
  RETURN_IF_ERROR(store.Set(absl::StrCat("train/wire/", rank),
                            absl::StrCat(counters.bytes_sent + counters.bytes_read)));
  int64_t wire = 0;
  const bool lost = config.kill_rank > 0 && !config.restart_killed;
  const int alive = world_size - (lost ? 1 : 0);
  if (reporter) {
    for (int r = 0; r < world_size; ++r) {
      if (lost && r == config.kill_rank) continue;
      ASSIGN_OR_RETURN(std::string bytes,
                       store.Get(absl::StrCat("train/wire/", r), config.timeout));
      int64_t value = 0;
      if (absl::SimpleAtoi(bytes, &value)) wire += value;
    }
  }
  // Rank 0 may host the store (torchrun without its agent, our netns
  // launches): nobody leaves before the reporter has read it.
  RETURN_IF_ERROR(rdma::Barrier(store, "train", "exit", alive, config.timeout));
  if (!reporter) return summary;
  summary.wire_bytes_per_step = static_cast<double>(wire) / std::max<int64_t>(steps, 1);
  summary.reported = true;
  summary.test_accuracy = Evaluate(model, test, 0);
  summary.final_loss = last_loss;
  summary.wall_s = wall_s;
  summary.mean_step_ms = 1000 * wall_s / std::max<int64_t>(steps, 1);
  summary.mean_comm_ms = Ms(comm_total) / std::max<int64_t>(steps, 1);
  summary.mean_wait_ms = Ms(wait_total) / std::max<int64_t>(steps, 1);
  if (config.progress) {
    progress.Finish(absl::StrFormat("test accuracy %.4f, %.1f s, %.1f ms/step",
                                    summary.test_accuracy, wall_s,
                                    summary.mean_step_ms));
  }
  return summary;
}

}  // namespace rdmaflow::train
