#include "torch_backend/process_group_rdmaflow.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "torch_backend/engine.h"
#include "torch_backend/tensor_collectives.h"
#include "torch_backend/tensor_types.h"

namespace rdmaflow::torch_backend {
namespace {

using Direction = DeviceStage::Direction;

absl::Status CheckRank(int rank, int size, const char* what) {
  if (rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": rank ", rank, " is outside a group of ", size));
  }
  return absl::OkStatus();
}

absl::Status CheckPeer(int peer, int rank, int size, int tag, const char* what) {
  RETURN_IF_ERROR(CheckRank(peer, size, what));
  if (peer == rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": rank ", rank, " cannot exchange a message with itself"));
  }
  if (tag < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": tag ", tag, " is negative; tags are 0 or more"));
  }
  return absl::OkStatus();
}

// Whether the caller waits on the Work at once: torch.distributed's
// async_op=False, which torch 2.11 passes down as Options::asyncOp. A torch
// whose options lack the field makes every call asynchronous.
template <typename Options, typename = void>
struct HasAsyncOp : std::false_type {};
template <typename Options>
struct HasAsyncOp<Options, std::void_t<decltype(std::declval<const Options&>().asyncOp)>>
    : std::true_type {};
template <typename Options>
bool CallerWaits(const Options& opts) {
  if constexpr (HasAsyncOp<Options>::value) {
    return !opts.asyncOp;
  } else {
    return false;
  }
}

}  // namespace

ProcessGroupRdmaflow::ProcessGroupRdmaflow(int rank, int size,
                                           std::unique_ptr<Engine> engine,
                                           std::unique_ptr<TensorDevice> device)
    : c10d::Backend(rank, size),
      device_(std::move(device)),
      engine_(std::move(engine)),
      repeated_(/*sightings=*/2, /*capacity=*/4096) {
  init();
}

ProcessGroupRdmaflow::~ProcessGroupRdmaflow() {
  engine_.reset();  // before the device it may copy through
}

absl::StatusOr<c10::intrusive_ptr<ProcessGroupRdmaflow>> ProcessGroupRdmaflow::Create(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    const BackendOptions& options) {
  std::unique_ptr<TensorDevice> device;
  if (options.device == "fake") {
    ASSIGN_OR_RETURN(device, TensorDevice::Fake());
  } else if (options.device == "none") {
    // No device, no CUDA context: CUDA tensors are refused.
  } else if (const int index = TensorDevice::CurrentCudaDevice(); index >= 0) {
    // Torch has CUDA and a device: the group takes the current one now, so
    // that every rank sets up the device all-reduce at creation.
    if (const std::string warning =
            DeviceChoiceWarning(options, index, TensorDevice::CudaDeviceCount());
        !warning.empty()) {
      std::fprintf(stderr, "rdmaflow rank %d: %s\n", rank, warning.c_str());
    }
    absl::StatusOr<std::unique_ptr<TensorDevice>> cuda = TensorDevice::Cuda(index);
    if (cuda.ok()) {
      device = *std::move(cuda);
    } else {
      std::fprintf(stderr, "rdmaflow rank %d: CUDA tensors will be refused: %s\n", rank,
                   std::string(cuda.status().message()).c_str());
    }
  }
  ASSIGN_OR_RETURN(c10::intrusive_ptr<ProcessGroupRdmaflow> group,
                   Create(store, rank, size, options, std::move(device)));
  group->no_device_ = options.device == "none";
  return group;
}

absl::StatusOr<c10::intrusive_ptr<ProcessGroupRdmaflow>> ProcessGroupRdmaflow::Create(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    const BackendOptions& options, std::unique_ptr<TensorDevice> device) {
  ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                   Engine::Start(store, rank, size, options, device.get()));
  return c10::make_intrusive<ProcessGroupRdmaflow>(rank, size, std::move(engine),
                                                   std::move(device));
}

TensorDevice* ProcessGroupRdmaflow::device() {
  absl::MutexLock lock(&device_mu_);
  return device_.get();
}

absl::Status ProcessGroupRdmaflow::StageCall(std::shared_ptr<DeviceStage>& stage,
                                             const std::vector<StageItem>& items) {
  ASSIGN_OR_RETURN(stage, NewStage(items));
  for (const StageItem& item : items) {
    if (item.one != nullptr) RETURN_IF_ERROR(stage->Stage(*item.one, item.direction));
    if (item.many != nullptr) RETURN_IF_ERROR(stage->Stage(*item.many, item.direction));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<DeviceStage>> ProcessGroupRdmaflow::NewStage(
    const std::vector<StageItem>& items) {
  absl::MutexLock lock(&device_mu_);
  for (const StageItem& item : items) {
    if (device_ != nullptr) break;
    std::vector<at::Tensor> one;
    if (item.one != nullptr) one.push_back(*item.one);
    for (const at::Tensor& tensor : item.many != nullptr ? *item.many : one) {
      if (!tensor.defined() || !tensor.is_cuda()) continue;
      if (no_device_) {
        return absl::InvalidArgumentError(
            "a CUDA tensor, but RDMAFLOW_DEVICE=none: this group moves CPU tensors only");
      }
      // (Making it selects its device on this thread: the caller's comes
      // back.)
      DeviceScope scope(tensor.device().index());
      ASSIGN_OR_RETURN(device_, TensorDevice::Cuda(tensor.device().index()));
      break;
    }
  }
  if (device_ != nullptr) {
    DeviceScope scope(device_.get());
    device_->Reap();
  }
  return std::make_shared<DeviceStage>(device_.get());
}

c10::intrusive_ptr<RdmaflowWork> ProcessGroupRdmaflow::NewWork(
    c10d::OpType type, std::vector<at::Tensor> outputs,
    const std::shared_ptr<DeviceStage>& stage) {
  std::vector<c10::Device> devices;
  for (const at::Tensor& tensor : outputs) {
    if (tensor.defined() && tensor.is_cuda()) {
      devices = {tensor.device()};
      break;
    }
  }
  auto work = c10::make_intrusive<RdmaflowWork>(rank_, type, std::move(outputs),
                                                std::move(devices));
  if (stage != nullptr && !stage->empty()) {
    const int64_t bytes = static_cast<int64_t>(stage->bytes());
    engine_->Count([bytes](BackendStats& stats) {
      ++stats.device_calls;
      stats.device_staged_bytes += bytes;
    });
  }
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmaflow::Enqueue(
    c10d::OpType type, std::vector<at::Tensor> outputs, bool caller_waits,
    std::function<absl::Status(Engine&, const c10::intrusive_ptr<RdmaflowWork>&)> run,
    std::shared_ptr<DeviceStage> stage) {
  if (engine_ == nullptr) return Failed(type, ShutDownError());
  const bool staged = stage != nullptr && !stage->empty();
  if (staged) {
    DeviceScope scope(stage->device());
    if (absl::Status s = stage->MarkCaller(); !s.ok()) return Failed(type, s);
    // The copy back runs while the transport is held, so that a call run
    // inline next cannot copy the same tensor in before it. Its failure
    // fails this call's Work, not the group: the collective itself went
    // through on every rank.
    // Where the engine's time on device calls goes (stats): in line after
    // the engine's earlier calls, waiting for the caller's stream (and
    // copying in), the call itself, the copy back.
    run = [stage, run = std::move(run), submitted = absl::Now()](
              Engine& engine, const c10::intrusive_ptr<RdmaflowWork>& work) {
      const absl::Duration timeout = engine.options().timeout;
      const absl::Time started = absl::Now();
      RETURN_IF_ERROR(stage->CopyIn(started + timeout));
      const absl::Time in = absl::Now();
      RETURN_IF_ERROR(run(engine, work));
      const absl::Time ran = absl::Now();
      absl::Status back = stage->CopyOut(ran + timeout);
      const absl::Time out = absl::Now();
      engine.Count([&](BackendStats& stats) {
        stats.device_queued_us += absl::ToInt64Microseconds(started - submitted);
        stats.device_wait_us += absl::ToInt64Microseconds(in - started);
        stats.device_run_us += absl::ToInt64Microseconds(ran - in);
        stats.device_back_us += absl::ToInt64Microseconds(out - ran);
      });
      if (!back.ok()) work->SetFinish([back] { return back; });
      return absl::OkStatus();
    };
  }
  c10::intrusive_ptr<RdmaflowWork> work = NewWork(type, std::move(outputs), stage);
  Engine::Op op{work, std::move(run), nullptr, ""};
  bool ran = false;
  if (caller_waits && !(staged && stage->on_device())) {
    // (The device all-reduce's progress loop is the engine thread's.)
    DeviceScope scope(staged ? stage->device() : nullptr);
    ran = engine_->TryRunInline(op, Engine::Inline::kCallerWaits);
  } else if (staged) {
    // An asynchronous call with device tensors waits for the caller's
    // stream: never on the caller's thread.
  } else if (type == c10d::OpType::ALLREDUCE || type == c10d::OpType::BROADCAST) {
    // Of the asynchronous calls only all-reduces and broadcasts run inline:
    // their outputs are all they move, so the size limit means what it says.
    size_t bytes = 0;
    for (const at::Tensor& tensor : work->result()) {
      bytes += static_cast<size_t>(tensor.numel()) * tensor.element_size();
    }
    ran = engine_->TryRunInline(op, Engine::Inline::kIfSmall, bytes);
  }
  if (!ran) engine_->Submit(std::move(op));
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmaflow::EnqueuePost(
    c10d::OpType type, std::vector<at::Tensor> outputs, std::string what,
    std::function<absl::StatusOr<uint64_t>(Engine&,
                                            const c10::intrusive_ptr<RdmaflowWork>&)>
        post,
    std::shared_ptr<DeviceStage> stage) {
  if (engine_ == nullptr) return Failed(type, ShutDownError());
  if (stage != nullptr && !stage->empty()) {
    DeviceScope scope(stage->device());
    if (absl::Status s = stage->MarkCaller(); !s.ok()) return Failed(type, s);
    post = [stage, post = std::move(post)](
               Engine& engine,
               const c10::intrusive_ptr<RdmaflowWork>& work) -> absl::StatusOr<uint64_t> {
      RETURN_IF_ERROR(stage->CopyIn(absl::Now() + engine.options().timeout));
      return post(engine, work);
    };
  }
  c10::intrusive_ptr<RdmaflowWork> work = NewWork(type, std::move(outputs), stage);
  if (stage != nullptr && !stage->empty()) {
    // A post's outputs come back when its Messenger completion fires (while
    // the transport is held).
    const absl::Duration timeout = engine_->options().timeout;
    work->SetFinish([stage, timeout] { return stage->CopyOut(absl::Now() + timeout); });
  }
  engine_->Submit({work, nullptr, std::move(post), std::move(what)});
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmaflow::OnDeviceOrNull(
    c10d::OpType type, std::vector<at::Tensor> tensors, std::vector<at::Tensor> results,
    bool caller_waits, std::function<absl::Status(Engine&)> run) {
  if (engine_ == nullptr || engine_->device_allreduce() == nullptr) return nullptr;
  for (const at::Tensor& tensor : tensors) {
    if (!tensor.is_contiguous()) return nullptr;
  }
  std::shared_ptr<DeviceStage> stage;
  if (absl::Status s = StageCall(stage, {{&tensors, Direction::kOnDevice}}); !s.ok()) {
    return Failed(type, s);
  }
  if (stage->on_device_count() != static_cast<int>(tensors.size())) return nullptr;
  return Enqueue(type, std::move(results), caller_waits,
                 [run = std::move(run)](Engine& engine, const auto&) { return run(engine); },
                 stage);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmaflow::DevicePostOrNull(
    c10d::OpType type, at::Tensor& tensor, std::string what,
    std::function<absl::StatusOr<uint64_t>(Engine&, const c10::intrusive_ptr<RdmaflowWork>&)>
        post) {
  if (engine_ == nullptr || engine_->device_p2p() == nullptr || !tensor.is_contiguous()) {
    return nullptr;
  }
  std::vector<at::Tensor> tensors = {tensor};
  std::shared_ptr<DeviceStage> stage;
  if (absl::Status s = StageCall(stage, {{&tensors, Direction::kOnDevice}}); !s.ok()) {
    return Failed(type, s);
  }
  if (stage->on_device_count() != 1) return nullptr;
  return EnqueuePost(type, tensors, std::move(what), std::move(post), stage);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmaflow::ExchangedOnDeviceOrNull(
    c10d::OpType type, const std::vector<at::Tensor>& some, const std::vector<at::Tensor>& more,
    std::vector<at::Tensor> results, bool caller_waits,
    std::function<absl::Status(Engine&)> run) {
  if (engine_ == nullptr || engine_->device_p2p() == nullptr) return nullptr;
  std::vector<at::Tensor> every = some;
  every.insert(every.end(), more.begin(), more.end());
  return OnDeviceOrNull(type, std::move(every), std::move(results), caller_waits,
                        std::move(run));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmaflow::SummedOnDeviceOrNull(
    c10d::OpType type, std::vector<at::Tensor> tensors, std::vector<at::Tensor> results,
    bool caller_waits, std::function<absl::Status(Engine&, collectives::DataType)> run) {
  if (tensors.empty()) return nullptr;
  absl::StatusOr<collectives::DataType> data_type = ReducibleType(tensors[0].scalar_type());
  if (!data_type.ok() || !DeviceAllReduce::Takes(*data_type, collectives::ReduceOp::kSum)) {
    return nullptr;
  }
  return OnDeviceOrNull(type, std::move(tensors), std::move(results), caller_waits,
                        [run = std::move(run), data_type = *data_type](Engine& engine) {
                          return run(engine, data_type);
                        });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmaflow::Failed(c10d::OpType type,
                                                           const absl::Status& status) {
  auto work = c10::make_intrusive<RdmaflowWork>(rank_, type, std::vector<at::Tensor>{});
  work->Complete(status);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmaflow::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  const c10d::OpType op_type = c10d::OpType::ALLREDUCE;
  if (absl::Status s = CheckSingle(tensors, "allreduce"); !s.ok()) return Failed(op_type, s);
  at::Tensor tensor = tensors[0];
  absl::StatusOr<collectives::DataType> type = ReducibleType(tensor.scalar_type());
  if (!type.ok()) return Failed(op_type, type.status());
  absl::StatusOr<Reduction> reduction = ToReduction(opts.reduceOp, tensor.scalar_type());
  if (!reduction.ok()) return Failed(op_type, reduction.status());
  // On the device where it reduces this type and op, else through a twin.
  const bool device_path = engine_ != nullptr && engine_->device_allreduce() != nullptr &&
                           DeviceAllReduce::Takes(*type, reduction->op);
  std::shared_ptr<DeviceStage> stage;
  if (absl::Status s = StageCall(
          stage, {{&tensor, device_path ? Direction::kOnDevice : Direction::kInOut}});
      !s.ok()) {
    return Failed(op_type, s);
  }
  if (stage->on_device()) {
    return Enqueue(op_type, tensors, CallerWaits(opts),
                   [tensor, type = *type, reduction = *reduction](Engine& engine,
                                                                  const auto&) mutable {
                     return DeviceAllReduceTensor(engine, tensor, type, reduction);
                   },
                   stage);
  }
  return Enqueue(op_type, tensors, CallerWaits(opts),
                 [tensor, type = *type, reduction = *reduction](
                     Engine& engine, const auto&) mutable {
                   return AllReduceTensor(engine, tensor, type, reduction);
                 },
                 stage);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmaflow::broadcast(
    std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  const c10d::OpType op_type = c10d::OpType::BROADCAST;
  if (absl::Status s = CheckSingle(tensors, "broadcast"); !s.ok()) return Failed(op_type, s);
  if (absl::Status s = CheckRank(opts.rootRank, size_, "broadcast root"); !s.ok()) {
    return Failed(op_type, s);
  }
  at::Tensor tensor = tensors[0];
  const int root = static_cast<int>(opts.rootRank);
  // On the device: copied, any dtype, with every rank on one host
  // (DeviceBroadcastTensor); elsewhere summed, of a type the device sums
  // (DeviceSumBroadcastTensor).
  if (engine_ != nullptr && engine_->device_allreduce() != nullptr &&
      engine_->device_allreduce()->copies_broadcasts()) {
    if (c10::intrusive_ptr<c10d::Work> work =
            OnDeviceOrNull(op_type, {tensor}, {tensor}, CallerWaits(opts),
                           [tensor, root](Engine& engine) mutable {
                             return DeviceBroadcastTensor(engine, tensor, root);
                           })) {
      return work;
    }
  } else if (c10::intrusive_ptr<c10d::Work> work = SummedOnDeviceOrNull(
                 op_type, {tensor}, {tensor}, CallerWaits(opts),
                 [tensor, root](Engine& engine, collectives::DataType type) mutable {
                   return DeviceSumBroadcastTensor(engine, tensor, root, type);
                 })) {
    return work;
  }
  std::shared_ptr<DeviceStage> stage;
  if (absl::Status s =
          StageCall(stage, {{&tensor, rank_ == root ? Direction::kIn : Direction::kOut}});
      !s.ok()) {
    return Failed(op_type, s);
  }
  return Enqueue(op_type, tensors, CallerWaits(opts),
                 [tensor, root](Engine& engine, const auto&) mutable {
                   return BroadcastTensor(engine, tensor, root);
                 },
                 stage);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmaflow::reduce(
    std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  const c10d::OpType op_type = c10d::OpType::REDUCE;
  if (absl::Status s = CheckSingle(tensors, "reduce"); !s.ok()) return Failed(op_type, s);
  if (absl::Status s = CheckRank(opts.rootRank, size_, "reduce root"); !s.ok()) {
    return Failed(op_type, s);
  }
  at::Tensor tensor = tensors[0];
  absl::StatusOr<collectives::DataType> type = ReducibleType(tensor.scalar_type());
  if (!type.ok()) return Failed(op_type, type.status());
  absl::StatusOr<Reduction> reduction = ToReduction(opts.reduceOp, tensor.scalar_type());
  if (!reduction.ok()) return Failed(op_type, reduction.status());
  const int root = static_cast<int>(opts.rootRank);
  // On the device where it reduces this type and op (DeviceReduceTensor).
  if (DeviceAllReduce::Takes(*type, reduction->op)) {
    if (c10::intrusive_ptr<c10d::Work> work = OnDeviceOrNull(
            op_type, {tensor}, tensors, CallerWaits(opts),
            [tensor, root, type = *type, reduction = *reduction](Engine& engine) mutable {
              return DeviceReduceTensor(engine, tensor, root, type, reduction);
            })) {
      return work;
    }
  }
  std::shared_ptr<DeviceStage> stage;
  if (absl::Status s =
          StageCall(stage, {{&tensor, rank_ == root ? Direction::kInOut : Direction::kIn}});
      !s.ok()) {
    return Failed(op_type, s);
  }
  return Enqueue(op_type, tensors, CallerWaits(opts),
                 [tensor, root, type = *type, reduction = *reduction](
                     Engine& engine, const auto&) mutable {
                   return ReduceTensor(engine, tensor, root, type, reduction);
                 },
                 stage);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmaflow::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  const c10d::OpType op_type = c10d::OpType::GATHER;
  if (absl::Status s = CheckSingle(inputs, "gather"); !s.ok()) return Failed(op_type, s);
  if (absl::Status s = CheckRank(opts.rootRank, size_, "gather root"); !s.ok()) {
    return Failed(op_type, s);
  }
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> targets;
  if (rank_ == root) {
    if (outputs.size() != 1 || static_cast<int>(outputs[0].size()) != size_) {
      return Failed(op_type, absl::InvalidArgumentError(absl::StrCat(
                                 "gather: the root needs one list of ", size_,
                                 " output tensors (one per rank)")));
    }
    for (const at::Tensor& output : outputs[0]) {
      if (absl::Status s = CheckSameShape(output, inputs[0], "gather output"); !s.ok()) {
        return Failed(op_type, s);
      }
    }
    targets = outputs[0];
  } else if (!outputs.empty() && !outputs[0].empty()) {
    return Failed(op_type, absl::InvalidArgumentError(
                               "gather: only the root passes output tensors"));
  }
  at::Tensor input = inputs[0];
  std::vector<at::Tensor> results = targets;
  // All on the device, with every rank on this host: device to device
  // (DeviceGatherTensors).
  if (c10::intrusive_ptr<c10d::Work> work = ExchangedOnDeviceOrNull(
          op_type, targets, {input}, results, CallerWaits(opts),
          [input, targets, root](Engine& engine) mutable {
            return DeviceGatherTensors(engine, input, targets, root);
          })) {
    return work;
  }
  std::shared_ptr<DeviceStage> stage;
  if (absl::Status s = StageCall(stage, {{&input, Direction::kIn}, {&targets, Direction::kOut}});
      !s.ok()) {
    return Failed(op_type, s);
  }
  return Enqueue(op_type, results, CallerWaits(opts),
                 [input, targets, root](Engine& engine, const auto&) mutable {
                   return GatherTensors(engine, input, targets, root);
                 },
                 stage);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmaflow::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  const c10d::OpType op_type = c10d::OpType::SCATTER;
  if (absl::Status s = CheckSingle(outputs, "scatter"); !s.ok()) return Failed(op_type, s);
  if (absl::Status s = CheckRank(opts.rootRank, size_, "scatter root"); !s.ok()) {
    return Failed(op_type, s);
  }
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> sources;
  if (rank_ == root) {
    if (inputs.size() != 1 || static_cast<int>(inputs[0].size()) != size_) {
      return Failed(op_type, absl::InvalidArgumentError(absl::StrCat(
                                 "scatter: the root needs one list of ", size_,
                                 " input tensors (one per rank)")));
    }
    for (const at::Tensor& input : inputs[0]) {
      if (absl::Status s = CheckSameShape(input, outputs[0], "scatter input"); !s.ok()) {
        return Failed(op_type, s);
      }
    }
    sources = inputs[0];
  } else if (!inputs.empty() && !inputs[0].empty()) {
    return Failed(op_type, absl::InvalidArgumentError(
                               "scatter: only the root passes input tensors"));
  }
  at::Tensor output = outputs[0];
  // All on the device, with every rank on this host: device to device
  // (DeviceScatterTensors).
  if (c10::intrusive_ptr<c10d::Work> work = ExchangedOnDeviceOrNull(
          op_type, sources, {output}, outputs, CallerWaits(opts),
          [sources, output, root](Engine& engine) mutable {
            return DeviceScatterTensors(engine, sources, output, root);
          })) {
    return work;
  }
  std::shared_ptr<DeviceStage> stage;
  if (absl::Status s = StageCall(stage, {{&sources, Direction::kIn}, {&output, Direction::kOut}});
      !s.ok()) {
    return Failed(op_type, s);
  }
  return Enqueue(op_type, outputs, CallerWaits(opts),
                 [sources, output, root](Engine& engine, const auto&) mutable {
                   return ScatterTensors(engine, sources, output, root);
                 },
                 stage);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmaflow::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const c10d::OpType op_type = c10d::OpType::ALLGATHER;
  if (absl::Status s = CheckSingle(inputs, "allgather"); !s.ok()) return Failed(op_type, s);
  if (outputs.size() != 1 || static_cast<int>(outputs[0].size()) != size_) {
    return Failed(op_type, absl::InvalidArgumentError(absl::StrCat(
                               "allgather: needs one list of ", size_,
                               " output tensors (one per rank)")));
  }
  for (const at::Tensor& output : outputs[0]) {
    if (absl::Status s = CheckSameShape(output, inputs[0], "allgather output"); !s.ok()) {
      return Failed(op_type, s);
    }
  }
  at::Tensor input = inputs[0];
  std::vector<at::Tensor> targets = outputs[0];
  std::vector<at::Tensor> results = targets;
  // All on the device, of a type it sums: there, through a flat tensor
  // (DeviceAllGatherListTensors).
  std::vector<at::Tensor> every = targets;
  every.push_back(input);
  if (c10::intrusive_ptr<c10d::Work> work = SummedOnDeviceOrNull(
          op_type, every, results, CallerWaits(opts),
          [input, targets](Engine& engine, collectives::DataType type) mutable {
            return DeviceAllGatherListTensors(engine, input, targets, type);
          })) {
    return work;
  }
  std::shared_ptr<DeviceStage> stage;
  if (absl::Status s = StageCall(stage, {{&input, Direction::kIn}, {&targets, Direction::kOut}});
      !s.ok()) {
    return Failed(op_type, s);
  }
  return Enqueue(op_type, results, CallerWaits(opts),
                 [input, targets](Engine& engine, const auto&) mutable {
                   return AllGatherTensors(engine, input, targets);
                 },
                 stage);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmaflow::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  const c10d::OpType op_type = c10d::OpType::_ALLGATHER_BASE;
  for (const at::Tensor* t : {&output, &input}) {
    if (absl::Status s = CheckDenseTensor(*t, "_allgather_base"); !s.ok()) {
      return Failed(op_type, s);
    }
  }
  if (output.scalar_type() != input.scalar_type() ||
      output.numel() != input.numel() * size_ || !output.is_contiguous()) {
    return Failed(op_type, absl::InvalidArgumentError(absl::StrCat(
                               "_allgather_base: the output must be a contiguous ",
                               c10::toString(input.scalar_type()), " tensor of ",
                               input.numel() * size_, " elements (", size_,
                               " times the input)")));
  }
  // Both on the device, of a type it sums: there (DeviceAllGatherTensor).
  if (c10::intrusive_ptr<c10d::Work> work = SummedOnDeviceOrNull(
          op_type, {input, output}, {output}, CallerWaits(opts),
          [input, output](Engine& engine, collectives::DataType type) mutable {
            return DeviceAllGatherTensor(engine, input, output, type);
          })) {
    return work;
  }
  std::vector<std::vector<at::Tensor>> outputs = {
      at::flatten(output).chunk(size_)};
  std::vector<at::Tensor> inputs = {input};
  return allgather(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmaflow::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const c10d::OpType op_type = c10d::OpType::REDUCE_SCATTER;
  if (absl::Status s = CheckSingle(outputs, "reduce_scatter"); !s.ok()) {
    return Failed(op_type, s);
  }
  if (inputs.size() != 1 || static_cast<int>(inputs[0].size()) != size_) {
    return Failed(op_type, absl::InvalidArgumentError(absl::StrCat(
                               "reduce_scatter: needs one list of ", size_,
                               " input tensors (one per rank)")));
  }
  at::Tensor output = outputs[0];
  for (const at::Tensor& input : inputs[0]) {
    if (absl::Status s = CheckSameShape(input, output, "reduce_scatter input"); !s.ok()) {
      return Failed(op_type, s);
    }
  }
  absl::StatusOr<collectives::DataType> type = ReducibleType(output.scalar_type());
  if (!type.ok()) return Failed(op_type, type.status());
  absl::StatusOr<Reduction> reduction = ToReduction(opts.reduceOp, output.scalar_type());
  if (!reduction.ok()) return Failed(op_type, reduction.status());
  std::vector<at::Tensor> sources = inputs[0];
  // All on the device, of a type and operator it reduces: there, through a
  // flat tensor (DeviceReduceScatterListTensors).
  if (DeviceAllReduce::Takes(*type, reduction->op)) {
    std::vector<at::Tensor> every = sources;
    every.push_back(output);
    if (c10::intrusive_ptr<c10d::Work> work = OnDeviceOrNull(
            op_type, every, outputs, CallerWaits(opts),
            [sources, output, type = *type, reduction = *reduction](Engine& engine) mutable {
              return DeviceReduceScatterListTensors(engine, sources, output, type, reduction);
            })) {
      return work;
    }
  }
  std::shared_ptr<DeviceStage> stage;
  if (absl::Status s = StageCall(stage, {{&sources, Direction::kIn}, {&output, Direction::kOut}});
      !s.ok()) {
    return Failed(op_type, s);
  }
  return Enqueue(op_type, outputs, CallerWaits(opts),
                 [sources, output, type = *type, reduction = *reduction](
                     Engine& engine, const auto&) mutable {
                   return ReduceScatterTensors(engine, sources, output, type, reduction);
                 },
                 stage);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmaflow::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  const c10d::OpType op_type = c10d::OpType::_REDUCE_SCATTER_BASE;
  for (const at::Tensor* t : {&output, &input}) {
    if (absl::Status s = CheckDenseTensor(*t, "_reduce_scatter_base"); !s.ok()) {
      return Failed(op_type, s);
    }
  }
  if (output.scalar_type() != input.scalar_type() ||
      input.numel() != output.numel() * size_) {
    return Failed(op_type, absl::InvalidArgumentError(absl::StrCat(
                               "_reduce_scatter_base: the input must hold ", size_,
                               " times the output's ", output.numel(), " elements")));
  }
  // Both on the device, of a type and operator it reduces: there
  // (DeviceReduceScatterTensor).
  absl::StatusOr<collectives::DataType> type = ReducibleType(output.scalar_type());
  absl::StatusOr<Reduction> reduction = ToReduction(opts.reduceOp, output.scalar_type());
  if (type.ok() && reduction.ok() && DeviceAllReduce::Takes(*type, reduction->op)) {
    if (c10::intrusive_ptr<c10d::Work> work = OnDeviceOrNull(
            op_type, {input, output}, {output}, CallerWaits(opts),
            [input, output, type = *type, reduction = *reduction](Engine& engine) mutable {
              return DeviceReduceScatterTensor(engine, input, output, type, reduction);
            })) {
      return work;
    }
  }
  std::vector<at::Tensor> outputs = {output};
  std::vector<std::vector<at::Tensor>> inputs = {at::flatten(input).chunk(size_)};
  return reduce_scatter(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmaflow::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return EachPair(c10d::OpType::COALESCED, "allgather_into_tensor_coalesced", outputs, inputs,
                  [&](at::Tensor& output, at::Tensor& input) {
                    return _allgather_base(output, input, opts);
                  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmaflow::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  return EachPair(c10d::OpType::COALESCED, "reduce_scatter_tensor_coalesced", outputs, inputs,
                  [&](at::Tensor& output, at::Tensor& input) {
                    return _reduce_scatter_base(output, input, opts);
                  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmaflow::EachPair(
    c10d::OpType type, const char* name, std::vector<at::Tensor>& outputs,
    std::vector<at::Tensor>& inputs,
    const std::function<c10::intrusive_ptr<c10d::Work>(at::Tensor&, at::Tensor&)>& one) {
  if (outputs.empty() || outputs.size() != inputs.size()) {
    return Failed(type, absl::InvalidArgumentError(absl::StrCat(
                            name, ": needs as many outputs as inputs, at least one (got ",
                            outputs.size(), " and ", inputs.size(), ")")));
  }
  c10::intrusive_ptr<c10d::Work> last;
  for (size_t i = 0; i < outputs.size(); ++i) {
    last = one(outputs[i], inputs[i]);
    if (last->isCompleted() && last->exception()) return last;
  }
  return last;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmaflow::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  const c10d::OpType op_type = c10d::OpType::ALLREDUCE_COALESCED;
  if (tensors.empty()) {
    return Failed(op_type, absl::InvalidArgumentError(
                               "allreduce_coalesced: needs at least one tensor"));
  }
  for (const at::Tensor& tensor : tensors) {
    if (absl::Status s = CheckDenseTensor(tensor, "allreduce_coalesced"); !s.ok()) {
      return Failed(op_type, s);
    }
    if (tensor.scalar_type() != tensors[0].scalar_type()) {
      return Failed(op_type, absl::InvalidArgumentError(absl::StrCat(
                                 "allreduce_coalesced: the tensors must share one dtype (",
                                 c10::toString(tensors[0].scalar_type()), " and ",
                                 c10::toString(tensor.scalar_type()), " given)")));
    }
  }
  absl::StatusOr<collectives::DataType> type = ReducibleType(tensors[0].scalar_type());
  if (!type.ok()) return Failed(op_type, type.status());
  absl::StatusOr<Reduction> reduction = ToReduction(opts.reduceOp, tensors[0].scalar_type());
  if (!reduction.ok()) return Failed(op_type, reduction.status());
  std::vector<at::Tensor> targets = tensors;
  // All on the device, of a type and operator it reduces: there, through a
  // flat tensor (DeviceAllReduceCoalescedTensors).
  if (DeviceAllReduce::Takes(*type, reduction->op)) {
    if (c10::intrusive_ptr<c10d::Work> work = OnDeviceOrNull(
            op_type, targets, tensors, CallerWaits(opts),
            [targets, type = *type, reduction = *reduction](Engine& engine) mutable {
              return DeviceAllReduceCoalescedTensors(engine, targets, type, reduction);
            })) {
      return work;
    }
  }
  std::shared_ptr<DeviceStage> stage;
  if (absl::Status s = StageCall(stage, {{&targets, Direction::kInOut}}); !s.ok()) {
    return Failed(op_type, s);
  }
  return Enqueue(op_type, tensors, CallerWaits(opts),
                 [targets, type = *type, reduction = *reduction](
                     Engine& engine, const auto&) mutable {
                   return AllReduceCoalescedTensors(engine, targets, type, reduction);
                 },
                 stage);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmaflow::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const c10d::OpType op_type = c10d::OpType::ALLGATHER_COALESCED;
  if (inputs.empty() || static_cast<int>(output_lists.size()) != size_) {
    return Failed(op_type, absl::InvalidArgumentError(absl::StrCat(
                               "allgather_coalesced: needs at least one input and ", size_,
                               " output lists (one per rank), got ", inputs.size(), " and ",
                               output_lists.size())));
  }
  for (const at::Tensor& input : inputs) {
    if (absl::Status s = CheckDenseTensor(input, "allgather_coalesced input"); !s.ok()) {
      return Failed(op_type, s);
    }
    if (input.scalar_type() != inputs[0].scalar_type()) {
      return Failed(op_type, absl::InvalidArgumentError(absl::StrCat(
                                 "allgather_coalesced: the inputs must share one dtype (",
                                 c10::toString(inputs[0].scalar_type()), " and ",
                                 c10::toString(input.scalar_type()), " given)")));
    }
  }
  std::vector<at::Tensor> flat_outputs;
  for (int r = 0; r < size_; ++r) {
    if (output_lists[r].size() != inputs.size()) {
      return Failed(op_type, absl::InvalidArgumentError(absl::StrCat(
                                 "allgather_coalesced: output list ", r, " has ",
                                 output_lists[r].size(), " tensors, one per input (",
                                 inputs.size(), ") expected")));
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (absl::Status s = CheckSameShape(output_lists[r][i], inputs[i],
                                          "allgather_coalesced output");
          !s.ok()) {
        return Failed(op_type, s);
      }
      flat_outputs.push_back(output_lists[r][i]);
    }
  }
  std::vector<at::Tensor> sources = inputs;
  std::vector<std::vector<at::Tensor>> targets = output_lists;
  std::shared_ptr<DeviceStage> stage;
  std::vector<StageItem> items = {{&sources, Direction::kIn}};
  for (std::vector<at::Tensor>& list : targets) items.push_back({&list, Direction::kOut});
  if (absl::Status s = StageCall(stage, items);
      !s.ok()) {
    return Failed(op_type, s);
  }
  return Enqueue(op_type, flat_outputs, CallerWaits(opts),
                 [sources, targets](Engine& engine, const auto&) mutable {
                   return AllGatherCoalescedTensors(engine, sources, targets);
                 },
                 stage);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmaflow::alltoall(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllToAllOptions& opts) {
  return AllToAll(c10d::OpType::ALLTOALL, outputs, inputs, CallerWaits(opts));
}

namespace {

// The bytes a tensor's elements span, [first, last + 1).
std::pair<uintptr_t, uintptr_t> Extent(const at::Tensor& t) {
  const auto begin = reinterpret_cast<uintptr_t>(t.data_ptr());
  int64_t last = 0;  // offset of the last element, in elements
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  return {begin, begin + static_cast<uintptr_t>(last + 1) * t.element_size()};
}

// Whether two tensors that go over in place share memory. Non-contiguous
// ones travel through buffers of their own (tensor_collectives.cc), so
// only contiguous pairs are compared, whose extents are exact.
bool Overlap(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0 || !a.is_contiguous() || !b.is_contiguous()) {
    return false;
  }
  const auto [a0, a1] = Extent(a);
  const auto [b0, b1] = Extent(b);
  return a0 < b1 && b0 < a1;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmaflow::AllToAll(
    c10d::OpType op_type, std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    bool caller_waits) {
  const char* what = op_type == c10d::OpType::ALLTOALL ? "alltoall" : "alltoall_base";
  if (static_cast<int>(inputs.size()) != size_ || static_cast<int>(outputs.size()) != size_) {
    return Failed(op_type, absl::InvalidArgumentError(absl::StrCat(
                               what, ": needs one input and one output tensor per rank (",
                               size_, "), got ", inputs.size(), " and ", outputs.size())));
  }
  for (int r = 0; r < size_; ++r) {
    for (const at::Tensor* t : {&inputs[r], &outputs[r]}) {
      if (absl::Status s = CheckDenseTensor(*t, what); !s.ok()) return Failed(op_type, s);
      if (t->scalar_type() != inputs[0].scalar_type()) {
        return Failed(op_type, absl::InvalidArgumentError(absl::StrCat(
                                   what, ": every tensor must be ",
                                   c10::toString(inputs[0].scalar_type()), " (",
                                   c10::toString(t->scalar_type()), " given for rank ", r,
                                   ")")));
      }
    }
  }
  if (inputs[rank_].numel() != outputs[rank_].numel()) {
    return Failed(op_type, absl::InvalidArgumentError(absl::StrCat(
                               what, ": this rank's part for itself has ",
                               inputs[rank_].numel(), " elements, its output for it ",
                               outputs[rank_].numel())));
  }
  // A part received into memory still being sent, or into another part,
  // would be overwritten while it moves.
  for (int r = 0; r < size_; ++r) {
    for (int q = 0; q < size_; ++q) {
      if ((q != r || r != rank_) && Overlap(outputs[r], inputs[q])) {
        return Failed(op_type, absl::InvalidArgumentError(absl::StrCat(
                                   what, ": the output for rank ", r,
                                   " shares memory with the input for rank ", q)));
      }
      if (q > r && Overlap(outputs[r], outputs[q])) {
        return Failed(op_type, absl::InvalidArgumentError(absl::StrCat(
                                   what, ": the outputs for ranks ", r, " and ", q,
                                   " share memory")));
      }
    }
  }
  std::vector<at::Tensor> sources = inputs;
  std::vector<at::Tensor> targets = outputs;
  // Every part on the device, with every rank on this host: device to
  // device (DeviceAllToAllTensors).
  if (c10::intrusive_ptr<c10d::Work> work = ExchangedOnDeviceOrNull(
          op_type, sources, targets, outputs, caller_waits,
          [sources, targets](Engine& engine) mutable {
            return DeviceAllToAllTensors(engine, sources, targets);
          })) {
    return work;
  }
  std::shared_ptr<DeviceStage> stage;
  if (absl::Status s = StageCall(stage, {{&sources, Direction::kIn}, {&targets, Direction::kOut}});
      !s.ok()) {
    return Failed(op_type, s);
  }
  return Enqueue(op_type, outputs, caller_waits,
                 [sources, targets](Engine& engine, const auto&) mutable {
                   return AllToAllTensors(engine, sources, targets);
                 },
                 stage);
}

namespace {

// Rows of `tensor` (along dim 0) per rank: `splits`, or equal parts when
// it is empty.
absl::StatusOr<std::vector<int64_t>> SplitSizes(const at::Tensor& tensor,
                                                const std::vector<int64_t>& splits, int size,
                                                const char* which) {
  const int64_t rows = tensor.dim() == 0 ? 1 : tensor.size(0);
  if (splits.empty()) {
    if (rows % size != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "alltoall_base: the ", which, "'s ", rows, " rows do not split evenly among ", size,
          " ranks; pass split sizes"));
    }
    return std::vector<int64_t>(size, rows / size);
  }
  int64_t total = 0;
  for (int64_t split : splits) {
    if (split < 0 || split > rows - total) {
      total = -1;
      break;
    }
    total += split;
  }
  if (static_cast<int>(splits.size()) != size || total != rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "alltoall_base: the ", which, " split sizes must be ", size,
        " non-negative row counts summing to its ", rows, " rows"));
  }
  return splits;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmaflow::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions& opts) {
  const c10d::OpType op_type = c10d::OpType::ALLTOALL_BASE;
  for (const at::Tensor* t : {&output, &input}) {
    if (absl::Status s = CheckDenseTensor(*t, "alltoall_base"); !s.ok()) {
      return Failed(op_type, s);
    }
    if (t->dim() == 0) {
      return Failed(op_type, absl::InvalidArgumentError(
                                 "alltoall_base: needs tensors of at least one dimension"));
    }
  }
  if (output.scalar_type() != input.scalar_type()) {
    return Failed(op_type, absl::InvalidArgumentError(absl::StrCat(
                               "alltoall_base: input and output must share a dtype (",
                               c10::toString(input.scalar_type()), " and ",
                               c10::toString(output.scalar_type()), " given)")));
  }
  absl::StatusOr<std::vector<int64_t>> in = SplitSizes(input, input_split_sizes, size_, "input");
  if (!in.ok()) return Failed(op_type, in.status());
  absl::StatusOr<std::vector<int64_t>> out =
      SplitSizes(output, output_split_sizes, size_, "output");
  if (!out.ok()) return Failed(op_type, out.status());
  // Views of both, part by part: contiguous parts go straight over.
  std::vector<at::Tensor> inputs = input.split_with_sizes(*in, 0);
  std::vector<at::Tensor> outputs = output.split_with_sizes(*out, 0);
  return AllToAll(op_type, outputs, inputs, CallerWaits(opts));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmaflow::barrier(const c10d::BarrierOptions& opts) {
  return Enqueue(c10d::OpType::BARRIER, {}, CallerWaits(opts),
                 [](Engine& engine, const auto&) { return engine.direct().Barrier(); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmaflow::send(std::vector<at::Tensor>& tensors,
                                                          int dst_rank, int tag) {
  const c10d::OpType op_type = c10d::OpType::SEND;
  if (absl::Status s = CheckSingle(tensors, "send"); !s.ok()) return Failed(op_type, s);
  if (absl::Status s = CheckPeer(dst_rank, rank_, size_, tag, "send"); !s.ok()) {
    return Failed(op_type, s);
  }
  at::Tensor tensor = tensors[0];
  // Device to device where every rank is on this host (DeviceP2p).
  if (c10::intrusive_ptr<c10d::Work> work = DevicePostOrNull(
          op_type, tensor,
          absl::StrCat("send of a CUDA tensor to rank ", dst_rank, " (tag ", tag,
                       "; it pairs with a receive of a CUDA tensor there)"),
          [tensor, dst_rank, tag](Engine& engine, const auto& work) {
            return PostDeviceSend(engine, tensor, dst_rank, tag, work);
          })) {
    return work;
  }
  std::shared_ptr<DeviceStage> stage;
  if (absl::Status s = StageCall(stage, {{&tensor, Direction::kIn}}); !s.ok()) {
    return Failed(op_type, s);
  }
  return EnqueuePost(op_type, tensors,
                     absl::StrCat("send to rank ", dst_rank, " (tag ", tag, ")"),
                     [tensor, dst_rank, tag](Engine& engine, const auto& work) {
                       return PostSend(engine, tensor, dst_rank, tag, work);
                     },
                     stage);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmaflow::recv(std::vector<at::Tensor>& tensors,
                                                          int src_rank, int tag) {
  const c10d::OpType op_type = c10d::OpType::RECV;
  if (absl::Status s = CheckSingle(tensors, "recv"); !s.ok()) return Failed(op_type, s);
  if (absl::Status s = CheckPeer(src_rank, rank_, size_, tag, "recv"); !s.ok()) {
    return Failed(op_type, s);
  }
  at::Tensor tensor = tensors[0];
  if (c10::intrusive_ptr<c10d::Work> work = DevicePostOrNull(
          op_type, tensor,
          absl::StrCat("receive of a CUDA tensor from rank ", src_rank, " (tag ", tag,
                       "; it pairs with a send of a CUDA tensor there)"),
          [tensor, src_rank, tag](Engine& engine, const auto& work) {
            return PostDeviceRecv(engine, tensor, src_rank, tag, work);
          })) {
    return work;
  }
  std::shared_ptr<DeviceStage> stage;
  if (absl::Status s = StageCall(stage, {{&tensor, Direction::kOut}}); !s.ok()) {
    return Failed(op_type, s);
  }
  return EnqueuePost(op_type, tensors,
                     absl::StrCat("receive from rank ", src_rank, " (tag ", tag, ")"),
                     [tensor, src_rank, tag](Engine& engine, const auto& work) {
                       return PostRecv(engine, tensor, src_rank, tag, work);
                     },
                     stage);
}

absl::StatusOr<absl::Duration> ProcessGroupRdmaflow::TimeBareAllReduce(const at::Tensor& tensor,
                                                                       int iterations) {
  if (engine_ == nullptr) return ShutDownError();
  auto result = std::make_shared<absl::StatusOr<absl::Duration>>(
      absl::InternalError("the bare all-reduce did not run"));
  c10::intrusive_ptr<c10d::Work> work =
      Enqueue(c10d::OpType::ALLREDUCE, {tensor}, /*caller_waits=*/true,
              [tensor, iterations, result](Engine& engine, const auto&) {
                *result = rdmaflow::torch_backend::TimeBareAllReduce(engine, tensor, iterations);
                return result->status();
              });
  try {
    work->wait();
  } catch (const std::exception&) {
    // The Work's error is the run's: in `result`.
  }
  return *result;
}

absl::StatusOr<at::Tensor> ProcessGroupRdmaflow::AllocateRegistered(
    const std::vector<int64_t>& shape, at::ScalarType dtype) {
  if (engine_ == nullptr) return ShutDownError();
  return engine_->AllocateRegistered(shape, dtype);
}

namespace {

// A device tensor into the device pool, after the caller's stream got to
// the move (`stage`). A move that fails for another reason than "not now"
// (kUnavailable) is a refusal: the bucket stays where it is and is staged,
// as one the pool cannot hold.
absl::Status MoveOnDevice(Engine& engine, DeviceStage& stage, const at::Tensor& tensor) {
  absl::Status status = stage.CopyIn(absl::Now() + engine.options().timeout);
  if (status.ok()) status = engine.MoveToDevicePool(tensor);
  if (status.ok() || absl::IsUnavailable(status) || absl::IsResourceExhausted(status) ||
      absl::IsInvalidArgument(status) || absl::IsFailedPrecondition(status)) {
    return status;
  }
  return absl::FailedPreconditionError(
      absl::StrCat("moving a device tensor into the device pool failed: ", status.ToString()));
}

}  // namespace

absl::Status ProcessGroupRdmaflow::MoveToRegistered(const at::Tensor& tensor) {
  if (engine_ == nullptr) return ShutDownError();
  if (engine_->IsRegistered(tensor)) return absl::OkStatus();
  if (Engine::OnEngineThread()) {
    // It would wait for the thread it runs on.
    return absl::FailedPreconditionError(
        "a tensor cannot be moved into registered memory from a Future callback "
        "(the backend's engine thread); move it from the thread that issues the "
        "collectives");
  }
  // A device tensor goes into the device pool once the caller's stream is
  // done with it (the stage marks where that stream is, and the move waits
  // for it itself: a wait that fails is this move's failure, not the
  // group's); the others into host memory.
  at::Tensor moved = tensor;
  std::shared_ptr<DeviceStage> stage;
  RETURN_IF_ERROR(StageCall(stage, {{&moved, Direction::kOnDevice}}));
  const bool on_device = stage->on_device();
  if (on_device) {
    DeviceScope scope(stage->device());
    RETURN_IF_ERROR(stage->MarkCaller());
  }
  // Who moves: the engine between operations (1), or nobody because the
  // caller gave up waiting first (2).
  struct Move {
    std::atomic<int> claim{0};
    absl::Status status;  // written by the engine before the Work completes
  };
  auto move = std::make_shared<Move>();
  c10::intrusive_ptr<c10d::Work> work = Enqueue(
      c10d::OpType::UNKNOWN, {}, /*caller_waits=*/false,
      [tensor, move, on_device, stage](Engine& engine, const auto&) {
        int pending = 0;
        if (move->claim.compare_exchange_strong(pending, 1)) {
          move->status = on_device ? MoveOnDevice(engine, *stage, tensor)
                                   : engine.MoveToRegistered(tensor);
        }
        return absl::OkStatus();
      });
  const absl::Duration timeout = engine_->options().timeout;
  bool timed_out = false;
  try {
    // At most a day at a time: an infinite timeout would overflow the wait.
    work->wait(std::chrono::milliseconds(std::clamp<int64_t>(
        absl::ToInt64Milliseconds(timeout), 1, int64_t{24} * 3600 * 1000)));
  } catch (const std::exception&) {
    timed_out = !work->isCompleted();  // else the group failed it: below
  }
  int pending = 0;
  if (timed_out && move->claim.compare_exchange_strong(pending, 2)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "moving a tensor into registered memory: the operations queued before it did "
        "not finish within ", absl::FormatDuration(timeout), "; it was not moved"));
  }
  // Done, failed by a broken group, or taken by the engine (a memcpy away
  // from done).
  try {
    work->wait();
  } catch (const std::exception& e) {
    return absl::FailedPreconditionError(e.what());
  }
  return move->status;
}

absl::StatusOr<bool> ProcessGroupRdmaflow::RegisterRepeated(const at::Tensor& tensor) {
  if (engine_ == nullptr) return ShutDownError();
  if (engine_->IsRegistered(tensor)) return true;
  if (!repeated_.Sighted(tensor)) return false;
  absl::Status moved = MoveToRegistered(tensor);
  if (moved.ok()) return engine_->IsRegistered(tensor);  // an empty one is not
  if (absl::IsUnavailable(moved)) {
    // Point-to-point operations in flight pass: the next sighting tries again.
    repeated_.Again(tensor);
    return false;
  }
  if (!absl::IsResourceExhausted(moved) && !absl::IsInvalidArgument(moved) &&
      !absl::IsFailedPrecondition(moved)) {
    return moved;
  }
  engine_->Count([](BackendStats& stats) { ++stats.moves_refused; });
  if (!warned_refusal_.exchange(true)) {
    std::fprintf(stderr,
                 "rdmaflow rank %d: a repeated %zu-byte buffer stays outside registered "
                 "memory and is staged: %s%s (warned once)\n",
                 rank_, tensor.defined() && tensor.has_storage() ? tensor.storage().nbytes() : 0,
                 std::string(moved.message()).c_str(),
                 absl::IsResourceExhausted(moved) &&
                         !absl::StrContains(moved.message(), "RDMAFLOW_DEVICE_POOL_MB")
                     ? "; RDMAFLOW_REGISTERED_MB sets the pool's size"
                     : "");
  }
  return false;
}

BackendStats ProcessGroupRdmaflow::stats() const {
  return engine_ != nullptr ? engine_->stats() : final_stats_;
}

void ProcessGroupRdmaflow::shutdown() {
  if (engine_ == nullptr) return;
  std::unique_ptr<Engine> engine = std::move(engine_);
  engine->Stop();  // bounded (Engine::Stop)
  final_stats_ = engine->stats();  // with the teardown's
  engine.reset();
}

void ProcessGroupRdmaflow::abort() { shutdown(); }

absl::Status ProcessGroupRdmaflow::ShutDownError() const {
  return absl::FailedPreconditionError(absl::StrCat(
      "rank ", rank_, ": this rdmaflow process group was shut down (destroy_process_group, "
      "shutdown or abort); create a new one"));
}

}  // namespace rdmaflow::torch_backend
