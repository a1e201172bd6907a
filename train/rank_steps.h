// File: rank_steps.h
// -----------------------------------------------------------------------------
// The steps of one training rank (RunTrainingRank in trainer.h), in order:
//
//   SetUpRank     the transport (from the registry), the model (same seed
//                 everywhere) and the strategy (from the registry), prepared
//                 over the job's store;
//   LoadRankData  this worker's shard of the training set and, on the
//                 reporting worker, the test set (before Start(): loading is
//                 not communication time);
//   RunStepLoop   Start(), the strategy's steps with a ComputeFn that trains
//                 on the next batch (per-step CSV, progress, periodic
//                 evaluation, the churn kill), Finish();
//   ReportRank    every rank's traffic through the store, the exit barrier,
//                 and the reporter's summary (final evaluation).
//
// Internal to train/.
#ifndef RDMAFLOW_TRAIN_RANK_STEPS_H_
#define RDMAFLOW_TRAIN_RANK_STEPS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "graph_analyzer/plan.pb.h"
#include "device/device_runtime.h"
#include "rdma/device/device_transport.h"
#include "rdma/store.h"
#include "rdma/transport.h"
#include "strategies/strategy.h"
#include "train/fashion_mnist.h"
#include "train/metrics_log.h"
#include "train/models.h"
#include "train/trainer.h"

namespace rdmaflow::train {

// The strategy's options from the trainer's flags (validation and the run
// share them).
strategies::StrategyOptions StrategyOptionsOf(const TrainConfig& config);

// A computing rank's data and training step (defined in rank_steps.cc).
class DeviceModel;
class Worker;

// What one rank holds from SetUpRank to ReportRank. Neither copyable nor
// movable: the strategy's context points into it.
struct RankState {
  RankState();
  ~RankState();
  RankState(const RankState&) = delete;
  RankState& operator=(const RankState&) = delete;

  int rank = 0;
  int world_size = 0;
  // With --device and a strategy that takes device parameters: the device
  // runtime, and `transport` a DeviceTransport over it (device_transport,
  // the same object), in which the strategy keeps them.
  std::unique_ptr<device::DeviceRuntime> device_runtime;
  std::unique_ptr<rdma::Transport> transport;
  rdma::device_path::DeviceTransport* device_transport = nullptr;
  Model model;
  // With --device on a rank that computes with the ComputeFn: the model's
  // copy on the device, staged (DeviceModel::Compute) or resident (the
  // strategy's parameters: DeviceModel::Resident).
  std::unique_ptr<DeviceModel> compute_device;
  // With --device, for a strategy that runs the model cut in two
  // (Strategy::runs_split: layer_separated, allreduce overlap=forward):
  // the model's copy on the device, and the features and head the strategy
  // runs there (the strategy's split).
  std::unique_ptr<DeviceModel> split_device;
  strategies::ModelSplit device_split;
  std::unique_ptr<strategies::Strategy> strategy;
  // The analyzer's plan of the exchange the strategy declared in Prepare().
  plan::TransferPlan plan;
  // The first computing rank: progress, evaluations and the summary.
  bool reporter = false;
  // From LoadRankData on, on ranks that compute.
  std::unique_ptr<Worker> worker;
  Dataset test;  // the reporter's
  // From RunStepLoop on.
  std::unique_ptr<Progress> progress;
};

// What RunStepLoop measured on a computing rank (zero elsewhere). Value type.
struct LoopTotals {
  int64_t steps = 0;
  double last_loss = 0;
  absl::Duration comm_time;
  absl::Duration wait_time;
  absl::Duration overlap_time;  // communication beside compute
  std::vector<double> step_ms;  // each step's time, ms
  std::vector<double> losses;   // each step's training loss
  double wall_s = 0;  // the loop's time, evaluations excluded
};

// Validates `config` (ValidateTrainConfig), creates the transport, the
// model and the strategy, and prepares the strategy for rank `rank`.
absl::StatusOr<std::unique_ptr<RankState>> SetUpRank(const TrainConfig& config, int rank,
                                                     int world_size, rdma::Store& store);

// Loads the data of a computing rank: kInvalidArgument when a worker's
// shard holds less than a batch; the loaders' errors.
absl::Status LoadRankData(const TrainConfig& config, RankState& state);

// Start(), the steps until the strategy is done, Finish().
absl::StatusOr<LoopTotals> RunStepLoop(const TrainConfig& config, RankState& state);

// Publishes this rank's traffic, waits for every live rank at the exit
// barrier and, on the reporter, returns the summary (reported = false
// elsewhere).
absl::StatusOr<TrainSummary> ReportRank(const TrainConfig& config, RankState& state,
                                        const LoopTotals& totals, rdma::Store& store);

}  // namespace rdmaflow::train

#endif  // RDMAFLOW_TRAIN_RANK_STEPS_H_
