// File: trainer.h
// -----------------------------------------------------------------------------
// One rank of a training job: builds the model (same seed everywhere), the
// strategy from the registry, the rank's shard of the data, and runs the
// strategy's steps with a ComputeFn that trains on the next batch. The
// first computing rank reports progress, evaluates on the test set every
// `eval_every` steps and at the end, and writes the summary. The steps
// (set-up, data, loop, report) are train/rank_steps.h's.
#ifndef RDMAFLOW_TRAIN_TRAINER_H_
#define RDMAFLOW_TRAIN_TRAINER_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rdma/store.h"
#include "train/sample_spec.h"

namespace rdmaflow::train {

// Value type; rdmaflow_train_main.cc fills it from flags.
struct TrainConfig {
  std::string model = "lenet5";
  std::string strategy = "ps";
  std::map<std::string, std::string> strategy_params;
  // The gradient codec (--codec, compression/codec.h); empty: none.
  std::string codec;
  std::string communicator = "rdma";
  // Where workers run forward and backward: cpu, cuda (GPU 0), or mirror
  // (the cuda path on a CPU copy, for tests). A strategy that takes device
  // parameters keeps them there, the others exchange host memory
  // (train/device_model.h).
  std::string device = "cpu";
  // With a device: stage the parameters through host memory also for a
  // strategy that takes device parameters (the ablation).
  bool stage_device_parameters = false;
  std::string transport = "ucx";
  std::string transport_params;
  int64_t steps = 300;
  int64_t batch_size = 64;
  double learning_rate = 0.05;
  double momentum = 0.9;
  uint64_t seed = 1;
  std::string data_dir;  // Fashion-MNIST idx files
  bool synthetic = false;
  int64_t synthetic_samples = 12000;
  // One sample and the classes: Fashion-MNIST's unless a user's model
  // (--model PATH.pt) takes other input, which then trains on synthetic
  // data of that shape.
  SampleSpec sample;
  int slow_rank = -1;
  double slow_factor = 1.0;
  // Churn: rank `kill_rank` kills itself (SIGKILL, no clean-up) when it is
  // about to start step `kill_step`; the others finish without it (the
  // strategies that tolerate it: gossip, moshpit). -1: nobody.
  int kill_rank = -1;
  int64_t kill_step = 0;
  // The launcher starts the killed rank again (launch::Churn's restart);
  // the others then wait for it at the end.
  bool restart_killed = false;
  // This process is that restarted rank: it does not kill itself again,
  // and its strategy rejoins the running job (StrategyContext::rejoining).
  bool rejoining = false;
  int64_t eval_every = 0;       // 0: only at the end
  int64_t eval_samples = 2000;  // of the test set, for the periodic points
  // <prefix>.rank<R>.csv (computing ranks), <prefix>.rank<R>.timeline.json
  // (every rank: its step timeline as a Chrome trace) and <prefix>.json.
  std::string log_prefix;
  absl::Duration timeout = absl::Seconds(120);
  bool progress = true;
};

// What the first computing rank measured. Value type.
struct TrainSummary {
  bool reported = false;  // false on ranks that do not compute
  double test_accuracy = 0;
  double final_loss = 0;
  double wall_s = 0;  // training time (evaluations excluded)
  double mean_step_ms = 0;
  // The median step (the upper middle of an even count): unlike the mean,
  // not moved by the first steps' warm-up (a GPU's libraries load then).
  double median_step_ms = 0;
  double mean_comm_ms = 0;
  double mean_wait_ms = 0;
  // Communication that ran beside compute (the step timeline's overlap).
  double mean_overlap_ms = 0;
  // With --device (ps, allreduce, gossip, moshpit workers): a step's
  // parameters in, forward and backward there, gradients out
  // (DeviceModel::Times), per step; 0 otherwise.
  double device_in_ms = 0;
  double device_compute_ms = 0;
  double device_out_ms = 0;
  // With --device: whether the strategy exchanged the device copy's own
  // parameters in device regions (Strategy::exchanges_on_device: allreduce,
  // layer_separated, moshpit, gossip pull, ps pull=read; nothing staged, in
  // and out are the batch's move only), rather than staged host parameters.
  bool device_resident = false;
  // Bytes every rank put on the wire (written or read), per step.
  double wire_bytes_per_step = 0;
  // The analyzer's plan of the exchange the strategy declared: registered
  // bytes over every rank, and tensors crossing between ranks.
  int64_t plan_registered_bytes = 0;
  int64_t plan_transfers = 0;
  // Of those, the ones received in device slots (docs/device.md).
  int64_t plan_device_transfers = 0;
  // The reporting rank's codec, per step: encoding and decoding (0 without
  // a codec).
  double encode_ms_per_step = 0;
  double decode_ms_per_step = 0;
};

// Bounds of the harness's numeric settings (the flags of rdmaflow_train).
inline constexpr int64_t kMaxBatchSize = 1 << 16;
inline constexpr int64_t kMaxSyntheticSamples = 1'000'000;  // 3 GB of images a rank
// The most bytes synthetic data (train and test splits, class templates)
// may take on a rank, whatever the sample's shape.
inline constexpr int64_t kMaxSyntheticBytes = int64_t{4} << 30;
inline constexpr double kMaxSlowFactor = 1000;

// Checks `config` for a job of `world_size` ranks without starting,
// connecting or loading anything, so that a launcher can refuse a bad
// command line before it starts any process: every number in range (steps,
// --batch_size 1..kMaxBatchSize, --synthetic_samples 1..kMaxSyntheticSamples
// and at least a batch for every rank, --lr finite and > 0, --momentum in
// [0, 1), --slow_factor in 1..kMaxSlowFactor, --timeout_s finite and > 0,
// --eval_every and --eval_samples >= 0), ranks inside the world
// (--slow_rank, --kill_rank not 0, --kill_step before the last step, ps
// --servers leaving a worker), known names (--model, --strategy and its
// parameters, --communicator, --transport and the syntax of its
// parameters), --restart_killed only with a strategy that takes a rank
// back, the Fashion-MNIST files present unless --synthetic, and the
// directory of --log_prefix existing. kInvalidArgument naming the flag.
absl::Status ValidateTrainConfig(const TrainConfig& config, int world_size);

// True when the job trains on synthetic data: --synthetic, or samples that
// are not Fashion-MNIST's.
inline bool UsesSyntheticData(const TrainConfig& config) {
  return config.synthetic || !config.sample.IsFashionMnist();
}

// Runs rank `rank` of `world_size` (collective). Errors name what failed;
// ValidateTrainConfig()'s first.
absl::StatusOr<TrainSummary> RunTrainingRank(const TrainConfig& config, int rank,
                                             int world_size, rdma::Store& store);

}  // namespace rdmaflow::train

#endif  // RDMAFLOW_TRAIN_TRAINER_H_
