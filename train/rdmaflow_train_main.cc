// File: rdmaflow_train_main.cc
// rdmaflow_train: trains a LibTorch model on Fashion-MNIST (or synthetic
// data) with a distributed strategy over rdmaflow. See docs/strategies.md.
//
//   rdmaflow_train --local 3 --model lenet5 --sync ssp:3 --steps 300
//   tools/torchrun.sh --nproc_per_node=3 --no_python bazel-bin/train/rdmaflow_train --model vgg ...
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/key_value_params.h"
#include "common/program_flags.h"
#include "common/status_macros.h"
#include "launch/launcher.h"
#include "launch/rank.h"
#include "rdma/store.h"
#include "results/json.h"
#include "results/results.pb.h"
#include "results/run_info.h"
#include "train/launch_env.h"
#include "train/trainer.h"

// The most ranks --local starts: each is a process with its own LibTorch
// and transport; more than this on one machine is a typo, not a job.
constexpr int kMaxLocalRanks = 256;

ABSL_FLAG(int, local, 0,
          "spawn this many ranks (2..256) as processes on this machine (the "
          "job's world size); without it, the rank comes from torchrun, mpirun "
          "or Slurm variables. Every flag is checked before any process starts");
ABSL_FLAG(std::string, model, "lenet5",
          "mlp | lenet5 | vgg | resnet, or PATH.pt / PATH.pth: a TorchScript module "
          "(torch.jit.save of a traced or scripted model), or PATH.pt2: a torch.export "
          "program (torch.export.save), giving [batch, --classes] logits "
          "(docs/bring_your_model.md)");
ABSL_FLAG(std::string, input, "1x28x28",
          "--model PATH.pt: one sample's shape, without the batch (1x28x28, 3x32x32, or "
          "16:int64 for token ids); anything but Fashion-MNIST's 1x28x28 trains on "
          "synthetic data of that shape");
ABSL_FLAG(int64_t, classes, 10, "--model PATH.pt: classes of its logits (2..100000)");
ABSL_FLAG(int64_t, vocab, 100, "--input ...:int64: synthetic token ids are in [0, vocab)");
ABSL_FLAG(std::string, strategy, "ps",
          "ps | allreduce | layer_separated | gossip | moshpit (docs/strategies.md)");
ABSL_FLAG(int, servers, 1, "ps: ranks 0..servers-1 are parameter servers");
ABSL_FLAG(std::string, sync, "bsp", "ps: bsp | asp | ssp:S | dssp:LOW:HIGH");
ABSL_FLAG(std::string, strategy_params, "",
          "more strategy settings, key=value,... (ps: servers=S, sync=MODE, pull=read|send, "
          "copies=K, overlap=off|on, slice_bytes=auto|B, prefetch=on|off (overlap=on; on under "
          "bsp), where servers and sync here win over --servers and --sync; allreduce: "
          "bucket_bytes=4M, chunk_bytes=256K, slots=32, overlap=on|off|forward, "
          "forward_bytes=auto|B; layer_separated: fc_ranks=K, overlap=off|on, bucket_bytes, "
          "chunk_bytes, slots; gossip: beta=0.5, "
          "period=1, topology=random|ring, mode=pull|push, copies=3, seed=1, overlap=off|on; "
          "moshpit: side=2, dims=D, period=1, group_timeout_ms=2000, round_timeout_ms=10000, "
          "overlap=off|on); an unknown key lists the known ones (docs/strategies.md)");
ABSL_FLAG(std::string, codec, "none",
          "gradient codec for allreduce, layer_separated (its conv ranks) and ps (topk): none | "
          "topk:ratio=R[,sampled=1] | randomk:ratio=R | int8[:bucket=N] | "
          "sketch[:rows=R,cols=C,k=K], each with feedback=0|1 (error feedback, on); "
          "see docs/compression.md");
ABSL_FLAG(std::string, communicator, "rdma", "rdma | rdma_copy | grpc");
ABSL_FLAG(std::string, device, "cpu",
          "where workers compute: cpu | cuda (GPU 0) | mirror (the cuda path on a CPU copy, "
          "for tests). allreduce, layer_separated (both without --codec), moshpit, gossip "
          "(pull) and ps (pull=read, without --codec) then keep the parameters on the device; "
          "ps pull=send, gossip push and codecs exchange host memory, staged each step");
ABSL_FLAG(bool, stage_device_parameters, false,
          "with --device: stage the parameters through host memory each step also for a "
          "strategy that keeps them on the device (allreduce, layer_separated, moshpit, gossip "
          "pull, ps pull=read): the ablation");
ABSL_FLAG(std::string, transport, "ucx", "ucx | ibverbs | loopback");
ABSL_FLAG(std::string, transport_params, "", "backend settings, key=value,...");
ABSL_FLAG(int64_t, steps, 300, "iterations per worker");
ABSL_FLAG(int64_t, batch_size, 64,
          "samples per worker per step (1..65536; each worker's shard of the "
          "training set must hold a batch)");
ABSL_FLAG(double, lr, 0.05, "learning rate (> 0)");
ABSL_FLAG(double, momentum, 0.9, "SGD momentum (0 <= m < 1)");
ABSL_FLAG(uint64_t, seed, 1, "seed of the model's parameters and the data order");
ABSL_FLAG(std::string, data_dir, "",
          "Fashion-MNIST idx files (default /usr/share/datasets/fashion-mnist, "
          "from Debian's dataset-fashion-mnist)");
ABSL_FLAG(bool, synthetic, false, "train on synthetic data instead");
ABSL_FLAG(int64_t, synthetic_samples, 12000,
          "training samples of --synthetic (1..1000000, and at least --batch_size "
          "per rank)");
ABSL_FLAG(int, slow_rank, -1, "rank whose compute is slowed (a straggler)");
ABSL_FLAG(double, slow_factor, 1.0, "how many times slower --slow_rank computes (1..1000)");
ABSL_FLAG(int, kill_rank, -1,
          "churn: this rank (not 0) kills itself (SIGKILL) before step --kill_step; "
          "the others go on without it where the strategy allows (gossip, moshpit)");
ABSL_FLAG(int64_t, kill_step, 0, "the step before which --kill_rank dies");
ABSL_FLAG(bool, restart_killed, false,
          "churn: with --local, start --kill_rank again once it died; it rejoins the "
          "job where the others are (strategies that take peers back: moshpit)");
ABSL_FLAG(int64_t, eval_every, 0,
          "evaluate on --eval_samples test images every N steps (0: at the end only)");
ABSL_FLAG(int64_t, eval_samples, 2000,
          "test images of the periodic evaluations (0: all)");
ABSL_FLAG(std::string, log_prefix, "",
          "write <prefix>.rank<R>.csv (per-step metrics) for each worker and "
          "<prefix>.rank<R>.timeline.json (each rank's step timeline, a Chrome trace)");
ABSL_FLAG(std::string, json, "", "write the run's summary as JSON here");
ABSL_FLAG(double, timeout_s, 120, "how long any wait for a peer may last (> 0)");
ABSL_FLAG(bool, progress, true, "show a progress bar (or lines)");

namespace rdmaflow::train {
namespace {

absl::StatusOr<TrainConfig> ConfigFromFlags() {
  TrainConfig config;
  config.model = absl::GetFlag(FLAGS_model);
  ASSIGN_OR_RETURN(config.sample.shape,
                   ParseSampleShape(absl::GetFlag(FLAGS_input), &config.sample.int64));
  config.sample.classes = absl::GetFlag(FLAGS_classes);
  config.sample.vocab = absl::GetFlag(FLAGS_vocab);
  config.strategy = absl::GetFlag(FLAGS_strategy);
  auto params = ParseKeyValues(absl::GetFlag(FLAGS_strategy_params), "strategy setting");
  if (!params.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--strategy_params: ", params.status().message()));
  }
  config.strategy_params = *params;
  if (config.strategy == "ps") {
    config.strategy_params.emplace("servers", absl::StrCat(absl::GetFlag(FLAGS_servers)));
    config.strategy_params.emplace("sync", absl::GetFlag(FLAGS_sync));
    if (absl::GetFlag(FLAGS_communicator) != "rdma") {
      config.strategy_params.emplace("pull", "send");  // no READ over RPC
    }
  }
  config.codec = absl::GetFlag(FLAGS_codec) == "none" ? "" : absl::GetFlag(FLAGS_codec);
  config.communicator = absl::GetFlag(FLAGS_communicator);
  config.device = absl::GetFlag(FLAGS_device);
  config.stage_device_parameters = absl::GetFlag(FLAGS_stage_device_parameters);
  config.transport = absl::GetFlag(FLAGS_transport);
  config.transport_params = absl::GetFlag(FLAGS_transport_params);
  config.steps = absl::GetFlag(FLAGS_steps);
  config.batch_size = absl::GetFlag(FLAGS_batch_size);
  config.learning_rate = absl::GetFlag(FLAGS_lr);
  config.momentum = absl::GetFlag(FLAGS_momentum);
  config.seed = absl::GetFlag(FLAGS_seed);
  config.data_dir = absl::GetFlag(FLAGS_data_dir);
  config.synthetic = absl::GetFlag(FLAGS_synthetic);
  config.synthetic_samples = absl::GetFlag(FLAGS_synthetic_samples);
  config.slow_rank = absl::GetFlag(FLAGS_slow_rank);
  config.slow_factor = absl::GetFlag(FLAGS_slow_factor);
  config.kill_rank = absl::GetFlag(FLAGS_kill_rank);
  config.kill_step = absl::GetFlag(FLAGS_kill_step);
  config.restart_killed = absl::GetFlag(FLAGS_restart_killed);
  config.rejoining = launch::IsRejoining();
  config.eval_every = absl::GetFlag(FLAGS_eval_every);
  config.eval_samples = absl::GetFlag(FLAGS_eval_samples);
  config.log_prefix = absl::GetFlag(FLAGS_log_prefix);
  config.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  config.progress = absl::GetFlag(FLAGS_progress);
  return config;
}

// kInvalidArgument naming `flag` when `path` is set and its directory is
// not one (the file would not be written at the end of the run).
absl::Status CheckOutputPath(const char* flag, const std::string& path) {
  if (path.empty()) return absl::OkStatus();
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code error;
  if (!parent.empty() && !std::filesystem::is_directory(parent, error)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", parent.string(), " is not a directory"));
  }
  return absl::OkStatus();
}

// The run's summary (results::TrainingSummary, docs/benchmarks.md): one
// line on stdout, and indented in --json's file.
void WriteSummary(const TrainConfig& config, int world_size,
                  const TrainSummary& s) {
  results::TrainingSummary summary;
  summary.set_model(config.model);
  summary.set_strategy(config.strategy);
  if (auto sync = config.strategy_params.find("sync"); sync != config.strategy_params.end()) {
    summary.set_sync(sync->second);
  }
  summary.set_communicator(config.communicator);
  summary.set_transport(config.transport);
  summary.set_world_size(world_size);
  summary.set_steps(config.steps);
  summary.set_batch_size(config.batch_size);
  summary.set_slow_rank(config.slow_rank);
  summary.set_slow_factor(config.slow_factor);
  summary.set_test_accuracy(s.test_accuracy);
  summary.set_final_loss(s.final_loss);
  summary.set_wall_s(s.wall_s);
  summary.set_mean_step_ms(s.mean_step_ms);
  summary.set_median_step_ms(s.median_step_ms);
  summary.set_device_in_ms(s.device_in_ms);
  summary.set_device_compute_ms(s.device_compute_ms);
  summary.set_device_out_ms(s.device_out_ms);
  summary.set_device_resident(s.device_resident);
  summary.set_mean_comm_ms(s.mean_comm_ms);
  summary.set_mean_wait_ms(s.mean_wait_ms);
  summary.set_mean_overlap_ms(s.mean_overlap_ms);
  summary.set_wire_bytes_per_step(s.wire_bytes_per_step);
  summary.set_plan_registered_bytes(static_cast<double>(s.plan_registered_bytes));
  summary.set_plan_transfers(static_cast<int32_t>(s.plan_transfers));
  summary.set_plan_device_transfers(static_cast<int32_t>(s.plan_device_transfers));
  summary.set_codec(config.codec);
  summary.set_encode_ms_per_step(s.encode_ms_per_step);
  summary.set_decode_ms_per_step(s.decode_ms_per_step);
  *summary.mutable_run() = results::NewRunInfo("rdmaflow_train", absl::Now() - absl::Seconds(s.wall_s));
  summary.mutable_run()->set_transport(config.transport);
  summary.mutable_run()->set_world_size(world_size);
  absl::StatusOr<std::string> line = results::ToJson(summary, results::JsonLayout::kOneLine);
  if (!line.ok()) {
    std::fprintf(stderr, "rdmaflow_train: summary: %s\n", line.status().ToString().c_str());
    return;
  }
  std::printf("%s", line->c_str());
  const std::string path = absl::GetFlag(FLAGS_json);
  if (path.empty()) return;
  if (absl::Status written = results::WriteJsonFile(summary, path); !written.ok()) {
    std::fprintf(stderr, "rdmaflow_train: --json: %s\n", written.ToString().c_str());
  }
}

int RunRank(const TrainConfig& config, int rank, int world_size,
            rdma::Store& store) {
  absl::StatusOr<TrainSummary> summary =
      RunTrainingRank(config, rank, world_size, store);
  if (!summary.ok()) {
    std::fprintf(stderr, "rdmaflow_train: rank %d: %s\n", rank,
                 summary.status().ToString().c_str());
    return 1;
  }
  if (summary->reported) WriteSummary(config, world_size, *summary);
  return 0;
}

int Main(int argc, char** argv) {
  rdmaflow::ParseProgramFlags(argc, argv,
      "trains a model with a distributed strategy over rdmaflow.\n"
      "  rdmaflow_train --local 3 --model lenet5 --sync ssp:3 --steps 300\n"
      "  tools/torchrun.sh --nproc_per_node=3 --no_python bazel-bin/train/rdmaflow_train --model vgg\n"
      "  rdmaflow_train --local 4 --model vgg --strategy layer_separated\n"
      "Under ps, ranks 0..servers-1 serve parameters and the others train; "
      "see docs/strategies.md.");
  absl::StatusOr<TrainConfig> config = ConfigFromFlags();
  if (!config.ok()) {
    std::fprintf(stderr, "rdmaflow_train: invalid flags: %s (see rdmaflow_train --help)\n",
                 std::string(config.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<std::optional<LaunchInfo>> launch = DetectLaunch(std::getenv);
  if (!launch.ok()) {
    std::fprintf(stderr, "rdmaflow_train: %s\n", launch.status().ToString().c_str());
    return 2;
  }
  auto body = [&](int rank, int world_size, rdma::Store& store) {
    return RunRank(*config, rank, world_size, store);
  };
  // Everything is checked here, before a store, a transport or a process
  // exists: a bad command line fails once, with the flag named.
  const int local = absl::GetFlag(FLAGS_local);
  if (!launch->has_value()) {
    if (local == 0) {
      std::fprintf(stderr,
                   "rdmaflow_train: a job needs at least 2 ranks: pass --local N "
                   "(N in 2..%d), or start it under torchrun, mpirun or srun\n",
                   kMaxLocalRanks);
      return 2;
    }
    if (local < 2 || local > kMaxLocalRanks) {
      std::fprintf(stderr, "rdmaflow_train: invalid flags: --local must be in 2..%d, got %d\n",
                   kMaxLocalRanks, local);
      return 2;
    }
  }
  const int world_size = launch->has_value() ? (*launch)->world_size : local;
  absl::Status valid = ValidateTrainConfig(*config, world_size);
  if (valid.ok()) valid = CheckOutputPath("--json", absl::GetFlag(FLAGS_json));
  if (!valid.ok()) {
    std::fprintf(stderr, "rdmaflow_train: invalid flags: %s (see rdmaflow_train --help)\n",
                 std::string(valid.message()).c_str());
    return 2;
  }
  if (launch->has_value()) {
    ExportLaunch(**launch);
    return launch::RunLaunchedRank(body);
  }
  return launch::RunLocalJob(
      local, argv, {},
      [&](rdma::Store& store) { return RunRank(*config, 0, local, store); },
      launch::Churn{config->kill_rank, config->restart_killed});
}

}  // namespace
}  // namespace rdmaflow::train

int main(int argc, char** argv) { return rdmaflow::train::Main(argc, argv); }
