// File: trainer.cc
#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "compression/codec.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "graph_analyzer/shape_util.h"
#include "rdma/builtin_transports.h"
#include "rdma/transport_registry.h"
#include "runtime/communicator_factory.h"
#include "strategies/builtin_strategies.h"
#include "strategies/strategy_registry.h"
#include "train/fashion_mnist.h"
#include "train/models.h"
#include "train/rank_steps.h"

namespace rdmaflow::train {

absl::Status ValidateTrainConfig(const TrainConfig& config, int world_size) {
  auto invalid = [](auto&&... pieces) {
    return absl::InvalidArgumentError(absl::StrCat(pieces...));
  };
  if (world_size < 1) return invalid("a job of ", world_size, " ranks");
  if (config.steps < 1) return invalid("--steps must be at least 1, got ", config.steps);
  if (config.device != "cpu" && config.device != "cuda" && config.device != "mirror") {
    return invalid("--device must be cpu, cuda or mirror (a CPU copy, for tests), got '",
                   config.device, "'");
  }
  if (config.stage_device_parameters && config.device == "cpu") {
    return invalid("--stage_device_parameters needs --device cuda or mirror");
  }
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
  if (!config.codec.empty()) {
    if (absl::Status codec = compression::ValidateCodecSpec(config.codec); !codec.ok()) {
      return invalid("--codec: ", codec.message());
    }
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
  if (UsesSyntheticData(config)) {
    // What the synthetic splits hold in memory, per rank: train, test (at
    // least 1000) and the class templates of float samples.
    const int64_t per_sample = graph::NumElements(config.sample.shape).value_or(kMaxSyntheticBytes);
    const int64_t width = config.sample.int64 ? 8 : 4;
    const int64_t samples = config.synthetic_samples + std::max<int64_t>(
                                                           config.synthetic_samples / 6, 1000);
    const int64_t classes = config.sample.int64 ? 0 : config.sample.classes;
    if (per_sample > kMaxSyntheticBytes / width / (samples + classes)) {
      return invalid("synthetic data of --input ", config.sample.ToString(), " x (",
                     config.synthetic_samples, " --synthetic_samples + the test split",
                     classes > 0 ? absl::StrCat(" + ", classes, " class templates") : "",
                     ") would take more than ", kMaxSyntheticBytes >> 30,
                     " GiB a rank; lower --synthetic_samples or the sample size");
    }
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
  if (config.sample.classes < 2 || config.sample.classes > 100000 ||
      config.sample.vocab < 1 || config.sample.vocab > (int64_t{1} << 31)) {
    return invalid("--classes must be in 2..100000 and --vocab in 1..2^31, got ",
                   config.sample.classes, " and ", config.sample.vocab);
  }
  if (IsModelFile(config.model)) {
    std::error_code error;
    if (!std::filesystem::is_regular_file(config.model, error)) {
      return invalid("--model ", config.model, ": no such file (a TorchScript module "
                     "saved with torch.jit.save)");
    }
  } else {
    const std::vector<std::string> models = ModelNames();
    if (std::find(models.begin(), models.end(), config.model) == models.end()) {
      return invalid("--model '", config.model, "' is unknown; models: ",
                     absl::StrJoin(models, ", "), ", or a TorchScript file (PATH.pt)");
    }
    if (!config.sample.IsFashionMnist()) {
      return invalid("--model ", config.model, " takes 1x28x28 images of 10 classes; "
                     "--input and --classes are for a TorchScript model");
    }
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
  ASSIGN_OR_RETURN(std::unique_ptr<RankState> state,
                   SetUpRank(config, rank, world_size, store));
  RETURN_IF_ERROR(LoadRankData(config, *state));
  ASSIGN_OR_RETURN(LoopTotals totals, RunStepLoop(config, *state));
  return ReportRank(config, *state, totals, store);
}

}  // namespace rdmaflow::train
