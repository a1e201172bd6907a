// File: layer_separated_strategy.cc
// Set-up and shutdown of layer-separated training: options, the choice of
// K, the plan and the groups; layer_separated_step.cc holds the steps.
#include "strategies/layer_separated/layer_separated_strategy.h"

#include <cstdio>
#include <set>
#include <utility>

#include "ATen/core/grad_mode.h"
#include "ATen/ops/cross_entropy_loss.h"
#include "ATen/ops/empty.h"
#include "ATen/ops/ones_like.h"
#include "ATen/ops/randn.h"
#include "ATen/ops/zeros.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "collectives/buckets.h"
#include "common/status_macros.h"
#include "graph_analyzer/planner.h"
#include "runtime/communicator_factory.h"
#include "runtime/rank_plan.h"
#include "strategies/device_tensors.h"
#include "strategies/strategy_params.h"

namespace rdmaflow::strategies::layer_separated {
namespace {

constexpr int64_t kProbeBytes = int64_t{4} << 20;

int64_t Bytes(const std::vector<Parameter>& params) {
  int64_t bytes = 0;
  for (const Parameter& p : params) bytes += p.tensor.numel() * sizeof(float);
  return bytes;
}

// Fastest of three runs of `run`, in seconds.
template <typename F>
double Fastest(F run) {
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const absl::Time begin = absl::Now();
    run();
    best = std::min(best, absl::ToDoubleSeconds(absl::Now() - begin));
  }
  return best;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LayerSeparatedStrategy>> LayerSeparatedStrategy::Create(
    const StrategyOptions& options) {
  DataParallelOptions group;
  int fc_ranks = 0;
  StrategyParams params("layer_separated", options.params);
  RETURN_IF_ERROR(params.Int("fc_ranks", 1, &fc_ranks));
  RETURN_IF_ERROR(params.Size("bucket_bytes", 0, &group.bucket_bytes));
  RETURN_IF_ERROR(params.Size("chunk_bytes", 64, &group.chunk_bytes));
  RETURN_IF_ERROR(params.Int("slots", 1, &group.slots));
  std::string overlap = "off";
  RETURN_IF_ERROR(params.Choice("overlap", {"off", "on"}, &overlap));
  std::string activations = "auto";
  RETURN_IF_ERROR(params.Choice("activations", {"auto", "host"}, &activations));
  RETURN_IF_ERROR(params.Done());
  RETURN_IF_ERROR(CheckTrainingOptions("layer_separated", options.steps,
                                       options.learning_rate, options.momentum));
  group.timeout = options.communicator_options.timeout;
  return std::unique_ptr<LayerSeparatedStrategy>(new LayerSeparatedStrategy(
      options, std::move(group), fc_ranks, overlap == "on", activations == "host"));
}

LayerSeparatedStrategy::~LayerSeparatedStrategy() {
  // The gradients point into the group's memory: let go of them first.
  group_.reset();
}

std::string LayerSeparatedStrategy::Where() const {
  return absl::StrCat("layer_separated ", conv_ ? "conv" : "FC", " rank ", context().rank);
}

std::string LayerSeparatedStrategy::Ns() const {
  return absl::StrCat(options().communicator_options.ns, "/layer_separated");
}

absl::StatusOr<graph::GraphDef> LayerSeparatedStrategy::DoPrepare(
    std::vector<Parameter> parameters) {
  const StrategyContext& job = context();
  if (job.split == nullptr || !job.split->features || !job.split->head ||
      !job.next_batch) {
    return absl::InvalidArgumentError(
        "layer_separated runs the model itself: it needs the model split at its "
        "first fully connected layer and the batches (rdmaflow_train gives both)");
  }
  if (job.world_size < 2 || job.batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer_separated needs at least 2 ranks (conv and FC) and a batch size, "
        "got ", job.world_size, " ranks and batch ", job.batch_size));
  }
  if (requested_fc_ranks_ >= job.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer_separated fc_ranks=", requested_fc_ranks_, " leaves no conv rank among ",
        job.world_size, " ranks"));
  }
  parameters_ = std::move(parameters);
  features_.clear();  // a Prepare() that failed may have filled them
  head_.clear();
  const std::set<std::string> head(job.split->head_parameters.begin(),
                                   job.split->head_parameters.end());
  for (const Parameter& p : parameters_) (head.count(p.name) ? head_ : features_).push_back(p);
  if (head_.empty()) {
    return absl::InvalidArgumentError(
        "layer_separated: the split gives the head no parameters");
  }
  // One ring over every rank: the probes below, and the final model.
  std::vector<size_t> bytes;
  for (const Parameter& p : parameters_) bytes.push_back(p.tensor.numel() * sizeof(float));
  ASSIGN_OR_RETURN(collectives::FusedLayout all, collectives::LayOut(bytes, 64));
  everyone_offsets_ = all.offsets;
  collectives::AllReduceGroupOptions ring;
  ring.ring.name = "layer_separated/everyone";
  ring.ring.capacity_bytes = std::max<size_t>(all.total_bytes, kProbeBytes);
  ring.ring.chunk_bytes = group_options_.chunk_bytes;
  ring.ring.slots = group_options_.slots;
  ring.ring.timeout = group_options_.timeout;
  ring.ring.loop = &loop();
  ring.direct = group_options_.direct;
  ring.device = job.device;
  std::vector<int> members;
  for (int r = 0; r < job.world_size; ++r) members.push_back(r);
  ASSIGN_OR_RETURN(everyone_, collectives::AllReduceGroup::Create(links(), members, ring));
  int k = requested_fc_ranks_;
  if (k == 0) {
    ASSIGN_OR_RETURN(k, ChooseK());
  }
  layout_.conv_ranks = job.world_size - k;
  layout_.fc_ranks = k;
  layout_.batch = job.batch_size;
  layout_.activation_shape = job.split->activation_shape;
  conv_ = job.rank < layout_.conv_ranks;
  fc_index_ = conv_ ? -1 : job.rank - layout_.conv_ranks;
  // Every rank decides alike (the same options, device and split); a plan
  // that differed would fail the communicators' plan check.
  activations_on_device_ = !host_activations_ && job.device != nullptr &&
                           options().communicator == "rdma" &&
                           job.split->device == TensorDeviceOf(job.device);
  return BuildStanzaGraph(layout_, activations_on_device_);
}

absl::StatusOr<int> LayerSeparatedStrategy::ChooseK() {
  const int n = context().world_size;
  const size_t probe = kProbeBytes / sizeof(float);
  {
    at::NoGradGuard no_grad;
    const c10::Device where = TensorDeviceOf(context().device);
    FloatsOver(everyone_->data(), probe, where).zero_();
    RETURN_IF_ERROR(SynchronizeTorchDevice(where));
  }
  RETURN_IF_ERROR(everyone_->AllReduce(0, probe, collectives::DataType::kFloat32));
  const double big_s = Fastest([&] {
    everyone_->AllReduce(0, probe, collectives::DataType::kFloat32).IgnoreError();
  });
  const double small_s = Fastest([&] {
    everyone_->AllReduce(0, 1, collectives::DataType::kFloat32).IgnoreError();
  });
  RETURN_IF_ERROR(everyone_->AllReduce(0, 1, collectives::DataType::kFloat32));
  const std::string key = absl::StrCat(Ns(), "/fc_ranks");
  if (context().rank != 0) {
    ASSIGN_OR_RETURN(std::string value,
                     context().store->Get(key, options().communicator_options.timeout));
    int k = 0;
    if (!absl::SimpleAtoi(value, &k) || k < 1 || k >= n) {
      return absl::InternalError(absl::StrCat("layer_separated: rank 0 chose K='", value, "'"));
    }
    return k;
  }
  // Rank 0 times the two parts on a synthetic batch and decides.
  const ModelSplit& split = *context().split;
  const int64_t b = context().batch_size;
  std::vector<int64_t> x_shape = {b}, a_shape = {b};
  x_shape.insert(x_shape.end(), split.sample_shape.begin(), split.sample_shape.end());
  a_shape.insert(a_shape.end(), split.activation_shape.begin(), split.activation_shape.end());
  at::Tensor x = at::randn(x_shape);
  // On the parts' device (a resident split's logits are there); each run
  // waits for its kernels, so that the times are the work's, not its
  // launches'.
  at::Tensor labels = at::zeros({b}, at::TensorOptions().dtype(at::kLong).device(split.device));
  costs_.conv_s = Fastest([&] {
    at::Tensor h = split.features(x);
    if (h.requires_grad()) h.backward(at::ones_like(h));
    SynchronizeTorchDevice(split.device).IgnoreError();
  });
  costs_.fc_s = Fastest([&] {
    at::Tensor a = at::randn(a_shape).requires_grad_(true);
    at::cross_entropy_loss(split.head(a), labels).backward();
    SynchronizeTorchDevice(split.device).IgnoreError();
  });
  for (Parameter& p : parameters_) p.tensor.mutable_grad() = at::Tensor();
  costs_.activation_bytes = static_cast<int64_t>(at::empty(a_shape).numel()) * 4 + b * 8;
  costs_.conv_param_bytes = Bytes(features_);
  costs_.fc_param_bytes = Bytes(head_);
  costs_.latency_s = small_s / (2.0 * (n - 1));
  costs_.bandwidth_bytes_per_s =
      2.0 * (n - 1) / n * kProbeBytes / std::max(big_s - small_s, 1e-9);
  const int k = ChooseFcRanks(costs_, n);
  std::fprintf(stderr,
               "layer_separated: conv %.2f ms, fc %.2f ms per batch of %lld; ring "
               "%.2f GB/s, %.1f us per hop; %s -> K=%d\n",
               costs_.conv_s * 1e3, costs_.fc_s * 1e3, static_cast<long long>(b),
               costs_.bandwidth_bytes_per_s / 1e9, costs_.latency_s * 1e6,
               DescribeChoices(costs_, n, b).c_str(), k);
  RETURN_IF_ERROR(context().store->Set(key, absl::StrCat(k)));
  return k;
}

absl::Status LayerSeparatedStrategy::DoStart() {
  runtime::CommunicatorOptions communication = communicator_options();
  // With overlap a conv rank sends the next batch's activations before it
  // receives this batch's gradients: its transfers run at their own pace
  // (the slots' two stages hold both batches).
  if (overlap_) communication.lockstep = false;
  ASSIGN_OR_RETURN(communicator_,
                   runtime::CreateCommunicator(options().communicator, plan(),
                                               *context().transport, *context().store,
                                               communication));
  std::optional<c10::Device> device;
  if (activations_on_device_) {
    device = TensorDeviceOf(context().device);
    // One tensor of the activations' size per conv rank served (FC) or
    // one (conv), each at a 64-byte boundary.
    int64_t elements = layout_.batch;
    for (int64_t d : layout_.activation_shape) elements *= d;
    arena_stride_ = (elements * static_cast<int64_t>(sizeof(float)) + 63) / 64 * 64;
    const int64_t tensors = conv_ ? 1 : static_cast<int64_t>(layout_.Served(fc_index_).size());
    absl::StatusOr<rdma::MemoryRegion> arena =
        context().transport->AllocateDevice(arena_stride_ * tensors);
    if (!arena.ok()) {
      return absl::Status(arena.status().code(),
                          absl::StrCat(Where(), ": device memory for the ",
                                       conv_ ? "activations" : "activations' gradients",
                                       " it sends (", arena_stride_ * tensors, " bytes): ",
                                       arena.status().message(),
                                       " (activations=host moves them through host memory)"));
    }
    send_arena_ = std::make_unique<rdma::MemoryRegion>(*std::move(arena));
    communicator_->AddSendArena(send_arena_.get());
  }
  ASSIGN_OR_RETURN(runtime::torch::TorchCommunicator tensors,
                   runtime::torch::TorchCommunicator::Create(*communicator_, plan(),
                                                             context().rank, device));
  tensors_ = std::make_unique<runtime::torch::TorchCommunicator>(std::move(tensors));
  ASSIGN_OR_RETURN(runtime::RankPlan mine, runtime::RankPlan::Create(plan(), context().rank));
  const std::vector<int> convs =
      conv_ ? std::vector<int>{context().rank} : layout_.Served(fc_index_);
  for (int i : convs) {
    const int fc = layout_.FcRankOf(i);
    const int k = fc - layout_.conv_ranks;
    const int peer = conv_ ? fc : i;
    Link link;
    link.conv = i;
    ASSIGN_OR_RETURN(link.act, mine.IdOf(conv_, ActTensor(i), peer));
    ASSIGN_OR_RETURN(link.labels, mine.IdOf(conv_, LabelsTensor(i), peer));
    ASSIGN_OR_RETURN(link.grad, mine.IdOf(!conv_, GradTensor(k, i), peer));
    ASSIGN_OR_RETURN(link.stats, mine.IdOf(!conv_, StatsTensor(k, i), peer));
    links_.push_back(link);
  }
  std::vector<int> members;
  const int first = conv_ ? 0 : layout_.conv_ranks;
  const int count = conv_ ? layout_.conv_ranks : layout_.fc_ranks;
  for (int r = first; r < first + count; ++r) members.push_back(r);
  DataParallelOptions group = group_options_;
  group.name = conv_ ? "layer_separated/conv" : "layer_separated/fc";
  // The codec is the convolutional ranks': their gradients are what the
  // many replicas exchange; the few FC ranks' stay dense.
  group.codec = conv_ ? options().codec : std::string();
  group.device = context().device;
  ASSIGN_OR_RETURN(group_, DataParallelGroup::Create(links(), members,
                                                     conv_ ? features_ : head_, group));
  on_device_ = group_->on_device() && everyone_->on_device();
  ParametersChanged();  // now views of the group's storage
  return absl::OkStatus();
}

absl::Status LayerSeparatedStrategy::DoFinish(bool after_failure) {
  ahead_ = at::Tensor();  // a failed step's forward ahead, and its graph
  if (after_failure) {
    // The others may never come to the final all-reduce or to the rings'
    // shutdown barriers: none of them is waited for. The communicator
    // completes or cancels what is in flight (its drain and barrier each
    // wait at most the timeout); the rings cancel theirs as they go.
    absl::Status shutdown = communicator_->Shutdown();
    final_counters_ = counters();
    group_stats_ = group_->stats();
    group_compression_ = group_->compression();
    group_.reset();
    everyone_.reset();
    return shutdown;
  }
  absl::Status status = ShareParameters(/*everything=*/true);
  if (absl::Status s = communicator_->Shutdown(); status.ok()) status = s;
  if (absl::Status s = group_->Shutdown(); status.ok()) status = s;
  if (absl::Status s = everyone_->Shutdown(); status.ok()) status = s;
  final_counters_ = counters();
  group_stats_ = group_->stats();
  group_compression_ = group_->compression();
  group_.reset();
  return status;
}

absl::Status LayerSeparatedStrategy::ShareParameters(bool everything) {
  // Conv rank 0 contributes the features, FC rank 0 (rank C) the head; the
  // others zeros, so the sum is an exact copy. Written and read with
  // torch's ops, on the parameters' device (device parameters: the ring's
  // region is device memory), complete before the ring's own work.
  at::NoGradGuard no_grad;
  const c10::Device where = TensorDeviceOf(context().device);
  at::Tensor region = FloatsOver(everyone_->data(),
                                 static_cast<int64_t>(everyone_->capacity() / sizeof(float)),
                                 where);
  region.zero_();
  const std::set<std::string> head(context().split->head_parameters.begin(),
                                   context().split->head_parameters.end());
  const bool give_features = context().rank == 0;
  const bool give_head = context().rank == layout_.conv_ranks;
  auto slot = [&](size_t i) {
    const at::Tensor& p = parameters_[i].tensor;
    return region.narrow(0, static_cast<int64_t>(everyone_offsets_[i] / sizeof(float)),
                         p.numel());
  };
  size_t total = 0;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const Parameter& p = parameters_[i];
    if (head.count(p.name) ? give_head : give_features) slot(i).copy_(p.tensor.reshape({-1}));
    total = std::max<size_t>(total, everyone_offsets_[i] + p.tensor.numel() * sizeof(float));
  }
  RETURN_IF_ERROR(SynchronizeTorchDevice(where));
  RETURN_IF_ERROR(everyone_->AllReduce(0, (total + 3) / 4, collectives::DataType::kFloat32));
  for (size_t i = 0; i < parameters_.size(); ++i) {
    // Mid-run, what this rank trains stays as it is: its replicas agree.
    if (!everything && head.count(parameters_[i].name) != static_cast<size_t>(conv_)) continue;
    // Past the version counter, as the group's SGD writes (a backward
    // still due, Stanza's forward ahead, reads the new values).
    parameters_[i].tensor.variable_data().view({-1}).copy_(slot(i));
  }
  // Nothing of torch's still reads the region after (it is freed after
  // the last exchange).
  RETURN_IF_ERROR(SynchronizeTorchDevice(where));
  ParametersChanged();
  return absl::OkStatus();
}

void LayerSeparatedStrategy::ParametersChanged() const {
  if (context().split->parameters_changed) context().split->parameters_changed();
}

runtime::TransferCounters LayerSeparatedStrategy::counters() const {
  if (finished() && group_ == nullptr) return final_counters_;
  runtime::TransferCounters counters =
      communicator_ != nullptr ? communicator_->counters() : runtime::TransferCounters{};
  const collectives::RingAllReduceStats ring =
      group_ != nullptr ? group_->stats() : group_stats_;
  counters.tensors_sent += ring.messages;
  counters.bytes_sent += ring.bytes_sent;
  return counters;
}

}  // namespace rdmaflow::strategies::layer_separated
