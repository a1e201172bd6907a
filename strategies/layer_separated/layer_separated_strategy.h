// File: layer_separated_strategy.h
// -----------------------------------------------------------------------------
// Layer-separated training ("layer_separated", Stanza by Chen et al.): of N
// ranks, C = N - K train only the model's features (the convolutional
// layers) and K only its head (the fully connected layers), so the head's
// parameters, most of a CNN's bytes, never cross the cluster. Each step:
//   conv rank: features(batch) -> writes activations and labels into its FC
//     rank's static slots; receives the activations' gradients (and the
//     loss); back-propagates; all-reduces the conv gradients among the C
//     conv ranks (sum); SGD.
//   FC rank: receives the activations of the conv ranks it serves, runs the
//     head forward and backward on them together (loss = sum over the
//     samples / global batch, so every rank follows the gradient of the
//     global mean loss), writes each conv rank its activation gradients,
//     all-reduces the head's gradients among the K FC ranks (sum); SGD.
// K comes from fc_ranks=K, or, by default, from the cost model
// (cost_model.h) with compute times and ring bandwidth measured at
// Prepare(). Finish() gives every rank the whole model (one all-reduce over
// all ranks, where only the first conv and the first FC rank contribute);
// ShareModel() between steps runs the same all-reduce but each rank takes
// only the part it does not train, so a harness can evaluate mid-run.
// Parameters: fc_ranks (auto), bucket_bytes, chunk_bytes, slots, overlap,
// activations.
// activations=auto (the default): with device parameters, a split whose
// parts return device tensors (ModelSplit::device) and the zero-copy
// communicator, the activations and their gradients stay on the device:
// each goes out of a send arena in device memory (one device copy) into a
// device slot of its receiver, which runs on it in place (on one host by
// CUDA IPC, across hosts staged by the device transport); the labels go
// from the host into device slots, the loss and accuracy host to host.
// activations=host (or any other case) moves them through host memory.
// overlap=on (off by default) is Stanza's pipeline: a conv rank forwards
// and sends batch t+1 before it receives batch t's gradients, so its
// forward overlaps the FC rank's work on batch t, and the FC rank's work on
// batch t+1 overlaps its backward and all-reduce of batch t. The cost is
// one step of staleness in the features (see ConvStep in
// layer_separated_step.cc and docs/strategies.md).
// A peer slower than the timeout: an FC rank waiting for activations, or a
// conv rank for their gradients, gets the communicator's kDeadlineExceeded
// naming the tensor and the peer rank; a ring that stalls, the ring's. After
// any failed step the rank is unusable: Step() returns kFailedPrecondition
// quoting the failure, and Finish() skips the final model and the rings'
// barriers (only the communicator's shutdown waits, each of its waits
// bounded by the timeout) and returns the failure; the ranks keep the
// parameters they had.
// See docs/strategies.md.
#ifndef RDMAFLOW_STRATEGIES_LAYER_SEPARATED_LAYER_SEPARATED_STRATEGY_H_
#define RDMAFLOW_STRATEGIES_LAYER_SEPARATED_LAYER_SEPARATED_STRATEGY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/allreduce_group.h"
#include "graph_analyzer/plan.pb.h"
#include "runtime/communicator.h"
#include "runtime/torch/torch_communicator.h"
#include "strategies/data_parallel.h"
#include "strategies/layer_separated/cost_model.h"
#include "strategies/layer_separated/stanza_graph.h"
#include "strategies/strategy.h"

namespace rdmaflow::strategies::layer_separated {

// Thread-compatible: one thread drives a rank's strategy.
class LayerSeparatedStrategy final : public Strategy {
 public:
  // kInvalidArgument for bad parameters or options.
  static absl::StatusOr<std::unique_ptr<LayerSeparatedStrategy>> Create(
      const StrategyOptions& options);
  ~LayerSeparatedStrategy() override;

  std::string name() const override { return "layer_separated"; }
  std::string role() const override { return conv_ ? "conv" : "fc"; }
  bool computes() const override { return conv_; }
  bool holds_full_model() const override { return false; }
  // ShareModel(): conv ranks get the head, FC ranks the features.
  bool shares_model() const override { return true; }
  // Without a codec (it encodes on the host): both groups' and the final
  // exchange's regions on the device, the split running on the device's
  // parameters (StrategyContext::split over them).
  bool takes_device_parameters() const override { return options().codec.empty(); }
  bool exchanges_on_device() const override { return on_device_; }
  int workers() const override { return layout_.conv_ranks; }
  int worker_index() const override { return conv_ ? context().rank : -1; }
  runtime::TransferCounters counters() const override;
  // The convolutional ranks' gradients go through StrategyOptions::codec.
  bool compresses() const override { return true; }
  compression::CompressionStats compression() const override {
    return group_ != nullptr ? group_->compression() : group_compression_;
  }

  const StanzaLayout& layout() const { return layout_; }
  // What the cost model saw (when it chose K).
  const StanzaCosts& costs() const { return costs_; }
  // The activations and their gradients cross in device slots (from
  // Prepare() on; activations= above).
  bool activations_on_device() const { return activations_on_device_; }

 private:
  LayerSeparatedStrategy(StrategyOptions options, DataParallelOptions group, int fc_ranks,
                         bool overlap, bool host_activations)
      : Strategy(std::move(options)), group_options_(std::move(group)),
        requested_fc_ranks_(fc_ranks), overlap_(overlap), host_activations_(host_activations) {}
  // kInvalidArgument without a model split or batch source, with fewer
  // than 2 ranks, or with fc_ranks >= ranks.
  absl::StatusOr<graph::GraphDef> DoPrepare(std::vector<Parameter> parameters) override;
  absl::Status DoStart() override;
  // layer_separated_step.cc. Steps run the model on next_batch(): the
  // ComputeFn is not used.
  absl::StatusOr<StepReport> DoStep(const ComputeFn& compute) override;
  bool needs_compute_fn() const override { return false; }
  bool runs_split() const override { return true; }
  // After a failure: skips the final model and the rings' barriers.
  absl::Status DoFinish(bool after_failure) override;
  std::string Where() const override;  // "layer_separated conv rank 0"
  std::string Ns() const;
  // Prepare(): times the parts and the ring (rank 0), picks K, shares it.
  absl::StatusOr<int> ChooseK();
  absl::StatusOr<int> FindId(bool send, const std::string& tensor, int peer) const;
  // layer_separated_step.cc
  absl::StatusOr<StepReport> ConvStep();
  // Runs features() on the next batch and sends its activations and
  // labels to the FC rank; the activations, with their graph.
  absl::StatusOr<at::Tensor> ForwardAndSend();
  absl::StatusOr<StepReport> FcStep();
  // What this rank sends of `tensors` (a step's activations, or its
  // gradients for each served conv rank), as the plan holds them: with the
  // activations on the device, copies in the send arena, one after another,
  // complete (the arena's last sends done before it is written again);
  // else the tensors on the host (a tracked move keeps the autograd graph).
  absl::StatusOr<std::vector<at::Tensor>> Outgoing(const std::vector<at::Tensor>& tensors);
  // Waits for torch's work on the received slots (device slots go back
  // when dropped); nothing to wait for on the host.
  absl::Status DoneWithSlots() const;
  absl::Status DoShareModel() override { return ShareParameters(/*everything=*/false); }
  // One all-reduce over every rank of conv rank 0's features and FC rank
  // 0's head. `everything`: every rank takes the whole model (the final
  // one); else only the part it does not train, which it then holds
  // until its next step.
  absl::Status ShareParameters(bool everything);
  // Tells the split the parameters' values changed (ModelSplit).
  void ParametersChanged() const;

  const DataParallelOptions group_options_;
  const int requested_fc_ranks_;  // 0: the cost model decides
  const bool overlap_;            // Stanza's pipeline (overlap=on)
  const bool host_activations_;   // activations=host
  bool activations_on_device_ = false;
  // With the activations on the device: what this rank's activations (conv)
  // or gradients (FC) go out of, registered with the communicator; after
  // it in this list, so that the communicator is gone first.
  std::unique_ptr<rdma::MemoryRegion> send_arena_;
  int64_t arena_stride_ = 0;  // bytes between its tensors
  // With overlap, on a conv rank: the activations of the batch whose
  // gradients come next, forwarded (and sent) during the step before.
  at::Tensor ahead_;
  std::vector<Parameter> parameters_;
  std::vector<Parameter> features_, head_;
  StanzaLayout layout_;
  StanzaCosts costs_;
  bool conv_ = true;
  int fc_index_ = -1;
  std::unique_ptr<collectives::AllReduceGroup> everyone_;  // final model, probes
  std::vector<size_t> everyone_offsets_;
  std::unique_ptr<runtime::Communicator> communicator_;
  std::unique_ptr<runtime::torch::TorchCommunicator> tensors_;
  std::unique_ptr<DataParallelGroup> group_;  // conv or FC replicas
  bool on_device_ = false;  // both groups', kept after Finish()
  collectives::RingAllReduceStats group_stats_;
  compression::CompressionStats group_compression_;
  runtime::TransferCounters final_counters_;
  // Transfer ids: conv rank: act, labels (sent), grad, stats (received);
  // FC rank: the same per served conv rank.
  struct Link {
    int conv = 0;
    int act = -1, labels = -1, grad = -1, stats = -1;
  };
  std::vector<Link> links_;
};

}  // namespace rdmaflow::strategies::layer_separated

#endif  // RDMAFLOW_STRATEGIES_LAYER_SEPARATED_LAYER_SEPARATED_STRATEGY_H_
