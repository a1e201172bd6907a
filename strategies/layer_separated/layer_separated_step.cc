// File: layer_separated_step.cc
// One step of each role of layer-separated training (see the header).
#include "ATen/ops/cat.h"
#include "ATen/ops/cross_entropy_loss.h"
#include "ATen/ops/stack.h"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "strategies/device_tensors.h"
#include "strategies/layer_separated/layer_separated_strategy.h"

namespace rdmaflow::strategies::layer_separated {

absl::StatusOr<StepReport> LayerSeparatedStrategy::DoStep(const ComputeFn&) {
  return conv_ ? ConvStep() : FcStep();
}

absl::StatusOr<std::vector<at::Tensor>> LayerSeparatedStrategy::Outgoing(
    const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> out;
  if (!activations_on_device_) {
    for (const at::Tensor& t : tensors) out.push_back(t.detach().to(at::kCPU).contiguous());
    return out;
  }
  const int64_t room = static_cast<int64_t>(send_arena_->size()) / arena_stride_;
  // The arena's last sends are done before it is written again.
  RETURN_IF_ERROR(communicator_->WaitSendsDone());
  const c10::Device where = TensorDeviceOf(context().device);
  for (size_t j = 0; j < tensors.size(); ++j) {
    const at::Tensor& t = tensors[j];
    if (static_cast<int64_t>(j) >= room ||
        t.numel() * static_cast<int64_t>(sizeof(float)) > arena_stride_) {
      return absl::InternalError(absl::StrCat(Where(), ": ", tensors.size(), " tensors of ",
                                              t.numel(), " floats do not fit its send arena (",
                                              room, " of ", arena_stride_, " bytes)"));
    }
    at::Tensor copy = FloatsOver(send_arena_->data() + j * arena_stride_, t.numel(), where)
                          .view(t.sizes());
    copy.copy_(t.detach());
    out.push_back(std::move(copy));
  }
  RETURN_IF_ERROR(SynchronizeTorchStream(where));  // the copies, before the transport reads
  return out;
}

absl::Status LayerSeparatedStrategy::DoneWithSlots() const {
  if (!activations_on_device_) return absl::OkStatus();
  return SynchronizeTorchDevice(TensorDeviceOf(context().device));
}

absl::StatusOr<at::Tensor> LayerSeparatedStrategy::ForwardAndSend() {
  ASSIGN_OR_RETURN(Batch batch, context().next_batch());
  if (batch.x.size(0) != layout_.batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer_separated conv rank ", context().rank, ": a batch of ", batch.x.size(0),
        " samples where the plan has slots for ", layout_.batch));
  }
  const Link& link = links_.front();
  at::Tensor act = context().split->features(batch.x);
  // Through host memory: a tracked move, so that the host gradients
  // back-propagate into the device's features (nothing on the host).
  if (!activations_on_device_) act = act.to(at::kCPU);
  ASSIGN_OR_RETURN(std::vector<at::Tensor> out, Outgoing({act}));
  RETURN_IF_ERROR(tensors_->Send(link.act, out.front()));
  RETURN_IF_ERROR(tensors_->Send(link.labels, batch.y.to(at::kLong).contiguous()));
  return act;
}

// With overlap (Stanza's pipeline) the step of batch t forwards and sends
// batch t+1 before it waits for batch t's gradients. Batch t+1's forward
// thus sees the features before batch t's update (one step stale), and its
// backward, a step later, runs after that update. DataParallelGroup gave
// each parameter a view of its flat storage with set_data(), which keeps
// the parameter's own version counter; its SGD writes the flat tensor, so
// autograd sees no new version of the weights the forward saved, and the
// backward multiplies by the updated values where a weight-stashing
// pipeline (PipeDream) would use the forward's. Both differences are one
// step of SGD, never more: the forward ahead is one batch, and the last
// step forwards nothing ahead. The step reports the features' staleness
// as min_clock = clock - 1.
absl::StatusOr<StepReport> LayerSeparatedStrategy::ConvStep() {
  StepReport report;
  report.clock = report.min_clock = clock();
  const Link& link = links_.front();
  group_->ZeroGradients();
  const absl::Time begin = absl::Now();
  at::Tensor act;
  // Batch t's activations went out during the step before (overlap): the
  // FC rank's work on them runs beside this step's forward.
  const bool sent_before = ahead_.defined();
  if (sent_before) {
    act = std::move(ahead_);
    ahead_ = at::Tensor();
    report.min_clock = clock() - 1;  // forwarded before the last update
  } else {
    ASSIGN_OR_RETURN(act, ForwardAndSend());
  }
  if (overlap_ && clock() + 1 < options().steps) {
    ASSIGN_OR_RETURN(ahead_, ForwardAndSend());
  }
  const absl::Time sent = absl::Now();
  ASSIGN_OR_RETURN(at::Tensor grad, tensors_->Recv(link.grad));
  // Declared after the slot: on a failed or throwing backward the device is
  // synchronised before the slot goes back (destruction runs in reverse).
  absl::Cleanup slot_guard = [this] { DoneWithSlots().IgnoreError(); };
  ASSIGN_OR_RETURN(at::Tensor stats, tensors_->Recv(link.stats));
  const absl::Time received = absl::Now();
  report.compute.loss = stats[0].item<double>();
  report.compute.accuracy = stats[1].item<double>();
  report.compute.samples = layout_.batch;
  if (act.requires_grad()) act.backward(grad);
  std::move(slot_guard).Cancel();
  // A failed sync (a broken device: its work is abandoned) returns the slot
  // unsynchronised.
  RETURN_IF_ERROR(DoneWithSlots());  // the backward read the gradients' slot
  act = at::Tensor();
  grad = at::Tensor();  // gives the slots back
  stats = at::Tensor();
  const absl::Time backward = absl::Now();
  RETURN_IF_ERROR(group_->AllReduceGradients(1.0, options().momentum));
  group_->ApplySgd(options().learning_rate, options().momentum);
  ParametersChanged();
  RETURN_IF_ERROR(tensors_->FinishStep());
  report.Add(StepSpan::Kind::kCompute, begin, sent);
  report.Add(StepSpan::Kind::kCommunication, sent_before ? begin : sent, received);
  report.Add(StepSpan::Kind::kWait, sent, received);  // the FC rank's work included
  report.Add(StepSpan::Kind::kCompute, received, backward);
  report.Add(StepSpan::Kind::kCommunication, backward, absl::Now());
  return report;
}

absl::StatusOr<StepReport> LayerSeparatedStrategy::FcStep() {
  StepReport report;
  report.clock = report.min_clock = clock();
  group_->ZeroGradients();
  const absl::Time begin = absl::Now();
  std::vector<at::Tensor> acts, labels;
  // Declared after the slots: a throwing cat, or a failed Recv after others
  // landed, synchronises the device before they go back (destruction runs
  // in reverse).
  absl::Cleanup slot_guard = [this] { DoneWithSlots().IgnoreError(); };
  for (const Link& link : links_) {
    ASSIGN_OR_RETURN(at::Tensor a, tensors_->Recv(link.act));
    ASSIGN_OR_RETURN(at::Tensor y, tensors_->Recv(link.labels));
    acts.push_back(std::move(a));
    labels.push_back(std::move(y));
  }
  const absl::Time received = absl::Now();
  at::Tensor a = at::cat(acts).requires_grad_(true);
  at::Tensor y = at::cat(labels);
  std::move(slot_guard).Cancel();
  RETURN_IF_ERROR(DoneWithSlots());  // the copies out of the slots
  acts.clear();  // gives the slots back
  labels.clear();
  at::Tensor logits = context().split->head(a);
  if (y.device() != logits.device()) y = y.to(logits.device());
  at::Tensor losses = at::cross_entropy_loss(logits, y, /*weight=*/{}, at::Reduction::None);
  // The gradient of the global batch's mean loss.
  losses.sum().div(static_cast<double>(layout_.batch * layout_.conv_ranks)).backward();
  at::Tensor correct = logits.argmax(1).eq(y).to(at::kFloat);
  const at::Tensor grad = a.grad();
  const absl::Time computed = absl::Now();
  const int64_t b = layout_.batch;
  std::vector<at::Tensor> grads;
  for (size_t j = 0; j < links_.size(); ++j) grads.push_back(grad.narrow(0, j * b, b));
  ASSIGN_OR_RETURN(std::vector<at::Tensor> out, Outgoing(grads));
  for (size_t j = 0; j < links_.size(); ++j) {
    RETURN_IF_ERROR(tensors_->Send(links_[j].grad, out[j]));
    at::Tensor stats = at::stack({losses.narrow(0, j * b, b).mean().detach(),
                                  correct.narrow(0, j * b, b).mean()})
                           .to(at::kCPU);
    RETURN_IF_ERROR(tensors_->Send(links_[j].stats, stats));
  }
  RETURN_IF_ERROR(group_->AllReduceGradients(1.0, options().momentum));
  group_->ApplySgd(options().learning_rate, options().momentum);
  ParametersChanged();
  RETURN_IF_ERROR(tensors_->FinishStep());
  report.compute.loss = losses.mean().item<double>();
  report.compute.accuracy = correct.mean().item<double>();
  report.compute.samples = b * static_cast<int64_t>(links_.size());
  report.Add(StepSpan::Kind::kCommunication, begin, received);
  report.Add(StepSpan::Kind::kWait, begin, received);
  report.Add(StepSpan::Kind::kCompute, received, computed);
  report.Add(StepSpan::Kind::kCommunication, computed, absl::Now());
  return report;
}

}  // namespace rdmaflow::strategies::layer_separated
