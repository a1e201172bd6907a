// File: ps_server.cc
// The parameter server's server role: take gradients as they come, apply
// SGD with momentum into the next version of the shard (of each slice of
// it, with overlap=on), publish clocks.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "ATen/core/grad_mode.h"
#include "ATen/ops/add.h"
#include "ATen/ops/cat.h"
#include "ATen/ops/zeros.h"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "onesided/progress/wait_policy.h"
#include "strategies/device_tensors.h"
#include "strategies/ps/ps_strategy.h"

namespace rdmaflow::strategies::ps {

absl::Status PsStrategy::StartServer() {
  at::NoGradGuard no_grad;
  const Shard& shard = shards_[index_];
  const std::vector<Slice>& slices = slices_[index_];
  // The model's initial values (every rank builds the same model from the
  // same seed; the servers' copy is the one that counts), on the
  // parameters' device.
  std::vector<at::Tensor> entries;
  for (const ShardEntry& entry : shard.entries) {
    entries.push_back(parameters_[entry.parameter].tensor.detach().reshape({-1}));
  }
  const at::Tensor initial = at::cat(entries);
  params_.clear();
  for (size_t k = 0; k < slices.size(); ++k) {
    const std::string name = ps_.overlap ? absl::StrCat("ps", index_, "/params_", k)
                                         : absl::StrCat("ps", index_, "/params");
    // Device parameters: the copies workers read are device memory.
    ASSIGN_OR_RETURN(auto buffer,
                     onesided::VersionedBuffer::Create(
                         links(), name, slices[k].elements * sizeof(float), ps_.copies,
                         on_device_ ? device::MemoryKind::kDevice : device::MemoryKind::kHost));
    // Version 1: the initial values, complete before they are published.
    RETURN_IF_ERROR(buffer->TryUpdate([&](std::byte* next, const std::byte*) {
      FloatsOver(next, slices[k].elements, where_)
          .copy_(initial.narrow(0, slices[k].offset, slices[k].elements));
      return SyncDevice("the initial parameters");
    }));
    params_.push_back(std::move(buffer));
  }
  ASSIGN_OR_RETURN(clocks_, onesided::VersionedBuffer::Create(
                                links(), absl::StrCat("ps", index_, "/clocks"),
                                ClockWords(index_) * sizeof(int64_t), ps_.copies));
  table_ = std::make_unique<ClockTable>(ps_.sync, workers_);
  const at::TensorOptions floats = at::TensorOptions().dtype(at::kFloat).device(where_);
  momentum_ = at::zeros({shard.elements}, floats);
  sum_ = at::zeros({shard.elements}, floats);
  taken_.assign(slices.size(), std::vector<int64_t>(workers_, 0));
  applied_.assign(slices.size(), 0);
  pushes_taken_.assign(workers_, 0);
  if (!codecs_.empty()) decoded_ = at::zeros({shard.elements}, at::kFloat);
  reply_due_.assign(workers_, !ps_.pull_by_read);
  PublishClocks();
  return SendReplies();
}

void PsStrategy::PublishClocks() {
  clocks_->Update([&](std::byte* next, const std::byte*) {
    int64_t* words = reinterpret_cast<int64_t*>(next);
    for (int w = 0; w < workers_; ++w) {
      words[w] = table_->Bound(w);
      words[workers_ + w] = table_->clock(w);
    }
    for (size_t k = 0; k < taken_.size(); ++k) {
      std::copy(taken_[k].begin(), taken_[k].end(), words + (2 + k) * workers_);
    }
  });
}

absl::Status PsStrategy::ApplyUpdate(int slice, const at::Tensor& gradient) {
  // SGD with momentum, as torch.optim.SGD: v = mu * v + g; p -= lr * v,
  // written straight into the next version (on the device, complete
  // before the version is published: VersionedBuffer::TryUpdate).
  at::NoGradGuard no_grad;
  const Slice& range = slices_[index_][slice];
  at::Tensor momentum = momentum_.narrow(0, range.offset, range.elements);
  momentum.mul_(options().momentum).add_(gradient);
  // An update that fails on the device publishes nothing.
  return params_[slice]->TryUpdate([&](std::byte* next, const std::byte* latest) {
    at::Tensor out = FloatsOver(next, range.elements, where_);
    at::add_out(out, FloatsOver(const_cast<std::byte*>(latest), range.elements, where_),
                momentum, -options().learning_rate);
    return SyncDevice("the update of the parameters");
  });
}

absl::Status PsStrategy::SendParameters(int worker) {
  const size_t bytes = shards_[index_].elements * sizeof(float);
  // Not in place: the copy may be rewritten while the write is in flight,
  // so the communicator stages it (an RPC server's reply copy). pull=send
  // has one slice, the whole shard.
  return communicator_->Send(params_ids_[worker],
                             {params_[0]->latest(), bytes,
                              {shards_[index_].elements}, nullptr});
}
absl::Status PsStrategy::SendReplies() {
  if (ps_.pull_by_read) return absl::OkStatus();
  if (table_->min_clock() >= options().steps) {
    // The end: every worker gets the final parameters.
    for (int w = 0; w < workers_; ++w) RETURN_IF_ERROR(SendParameters(w));
    return absl::OkStatus();
  }
  for (int w = 0; w < workers_; ++w) {
    const int64_t clock = table_->clock(w);
    if (!reply_due_[w] || clock >= options().steps || clock > table_->Bound(w)) {
      continue;
    }
    RETURN_IF_ERROR(SendParameters(w));
    reply_due_[w] = false;
  }
  return absl::OkStatus();
}

absl::Status PsStrategy::TakeGradient(int worker, int slice, bool& completed) {
  ASSIGN_OR_RETURN(runtime::ReceivedTensor tensor,
                   communicator_->Recv(grad_ids_[worker][slice]));
  // However this ends, torch's kernels that read the slot are done before
  // it goes back to the worker with `tensor` (declared after it: runs
  // first); the success path waits below and reports a failed wait.
  absl::Cleanup reads_done = [this] {
    if (absl::Status s = SyncDevice("the reads of a pushed gradient that failed"); !s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    }
  };
  const Slice& range = slices_[index_][slice];
  const size_t expected = PushElements()[index_][slice] * sizeof(float);
  if (tensor.bytes() != expected) {
    return absl::DataLossError(absl::StrCat(
        Where(), ": worker ", worker, " pushed ", tensor.bytes(),
        " bytes of gradient", ps_.overlap ? absl::StrCat(" for slice ", slice) : "",
        ", expected ", expected));
  }
  // The gradient is read where it landed (decoded from there, with a
  // codec: one slice, the whole shard), then the slot goes back.
  if (tensor.on_device() != on_device_) {
    return absl::FailedPreconditionError(absl::StrCat(
        Where(), ": worker ", worker, "'s gradient landed in ",
        tensor.on_device() ? "device" : "host", " memory, this server's parameters are on ",
        where_.str(), "; do all ranks run with the same --device?"));
  }
  at::NoGradGuard no_grad;
  at::Tensor gradient;
  if (codecs_.empty()) {
    gradient = FloatsOver(tensor.data(), range.elements, where_);
  } else {
    const absl::Time begin = absl::Now();
    decoded_.zero_();
    absl::Status decoded = codecs_[index_]->AddMessage(
        absl::MakeConstSpan(tensor.data(), tensor.bytes()),
        static_cast<uint64_t>(pushes_taken_[worker]), worker,
        absl::MakeSpan(decoded_.data_ptr<float>(), static_cast<size_t>(range.elements)), 1.0f);
    if (!decoded.ok()) {
      return absl::Status(decoded.code(),
                          absl::StrCat(Where(), ": the push of worker ", worker, " (rank ",
                                       ps_.servers + worker, "): ", decoded.message()));
    }
    codec_stats_.decode_time += absl::Now() - begin;
    ++codec_stats_.calls;
    gradient = decoded_;
  }
  ++taken_[slice][worker];
  if (ps_.sync.mode == SyncMode::kBsp) {
    at::Tensor sum = sum_.narrow(0, range.offset, range.elements);
    sum.add_(gradient);
    // The slice's step is complete once every worker's slice is in.
    const bool all = std::all_of(taken_[slice].begin(), taken_[slice].end(),
                                 [&](int64_t n) { return n > applied_[slice]; });
    if (all) {
      RETURN_IF_ERROR(ApplyUpdate(slice, sum.div_(workers_)));
      sum.zero_();
      ++applied_[slice];
      updates_ = *std::min_element(applied_.begin(), applied_.end());
    }
  } else {
    RETURN_IF_ERROR(ApplyUpdate(slice, gradient.div(workers_)));
  }
  // The slot goes back to the worker when `tensor` goes: torch's kernels
  // that read it first.
  std::move(reads_done).Cancel();
  RETURN_IF_ERROR(SyncDevice("the reads of a pushed gradient"));
  // The worker's step is complete once every slice of it is in.
  completed = std::all_of(taken_.begin(), taken_.end(), [&](const std::vector<int64_t>& row) {
    return row[worker] > table_->clock(worker);
  });
  if (completed) {
    if (ps_.sync.mode != SyncMode::kBsp) ++updates_;
    ++pushes_taken_[worker];
    table_->OnPush(worker, absl::ToDoubleSeconds(absl::Now() - start_time_));
    history_.push_back(table_->clocks());
    reply_due_[worker] = !ps_.pull_by_read;
  }
  PublishClocks();
  return completed ? SendReplies() : absl::OkStatus();
}

absl::StatusOr<StepReport> PsStrategy::ServerStep() {
  const absl::Time begin = absl::Now();
  absl::Time deadline = begin + options().communicator_options.timeout;
  const int slices = static_cast<int>(slices_[index_].size());
  // A pass that took nothing waits as the communicator's own waits do: it
  // spins, then sleeps, leaving the cores to the workers' compute where
  // ranks outnumber them (a yield here held 0.8 of a core on 2 cores).
  onesided::IdleBackoff backoff(options().communicator_options.wait);
  while (true) {
    for (int i = 0; i < workers_; ++i) {
      const int w = (next_worker_ + i) % workers_;
      const int64_t clock = table_->clock(w);
      if (clock >= options().steps) continue;
      for (int k = 0; k < slices; ++k) {
        // A slice already taken for the worker's current step, or under bsp
        // one ahead of the others' (its next step's), waits.
        if (taken_[k][w] > clock) continue;
        if (ps_.sync.mode == SyncMode::kBsp && taken_[k][w] > applied_[k]) continue;
        ASSIGN_OR_RETURN(bool ready, communicator_->Ready(grad_ids_[w][k]));
        if (!ready) continue;
        const absl::Time arrived = absl::Now();
        bool completed = false;
        RETURN_IF_ERROR(TakeGradient(w, k, completed));
        deadline = absl::Now() + options().communicator_options.timeout;
        backoff.Reset();
        if (!completed) continue;
        next_worker_ = (w + 1) % workers_;
        StepReport report;
        report.clock = updates_;
        report.min_clock = table_->min_clock();
        report.Add(StepSpan::Kind::kCommunication, begin, arrived);
        report.Add(StepSpan::Kind::kWait, begin, arrived);
        report.Add(StepSpan::Kind::kCompute, arrived, absl::Now());  // the optimizer
        return report;
      }
    }
    if (absl::Now() > deadline) {
      // The workers it waits for: the slowest ones still running.
      std::vector<std::string> waiting;
      const int64_t slowest = table_->min_clock();
      for (int w = 0; w < workers_; ++w) {
        const int64_t clock = table_->clock(w);
        if (clock >= options().steps) continue;
        // Under bsp these are the ones whose gradient the step lacks.
        if (clock != slowest) continue;
        waiting.push_back(
            absl::StrCat("worker ", w, " (rank ", ps_.servers + w, ") at clock ", clock));
      }
      return absl::DeadlineExceededError(absl::StrCat(
          Where(), " received no gradient for ",
          absl::FormatDuration(options().communicator_options.timeout), " from ",
          absl::StrJoin(waiting, ", "), "; the workers' clocks are [",
          absl::StrJoin(table_->clocks(), ", "), "] of ", options().steps,
          " steps: is a worker stuck or dead?"));
    }
    backoff.Idle(deadline - absl::Now());
  }
}

}  // namespace rdmaflow::strategies::ps
