// File: ps_server.cc
// The parameter server's server role: take gradients as they come, apply
// SGD with momentum into the next version of the shard, publish clocks.
#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

#include "ATen/ops/add.h"
#include "ATen/ops/from_blob.h"
#include "ATen/ops/zeros.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "strategies/ps/ps_strategy.h"

namespace rdmaflow::strategies::ps {
namespace {

at::Tensor FloatView(const std::byte* data, int64_t elements) {
  return at::from_blob(const_cast<std::byte*>(data), {elements},
                          at::kFloat);
}

}  // namespace

absl::Status PsStrategy::StartServer() {
  const Shard& shard = shards_[index_];
  const size_t bytes = shard.elements * sizeof(float);
  ASSIGN_OR_RETURN(params_, onesided::VersionedBuffer::Create(
                                links(), absl::StrCat("ps", index_, "/params"), bytes,
                                ps_.copies));
  // Version 1: the model's initial values (every rank builds the same model
  // from the same seed; the servers' copy is the one that counts).
  params_->Update([&](std::byte* next, const std::byte*) {
    for (const ShardEntry& entry : shard.entries) {
      const at::Tensor& p = parameters_[entry.parameter].tensor;
      std::memcpy(next + entry.offset * sizeof(float), p.data_ptr<float>(),
                  entry.elements * sizeof(float));
    }
  });
  ASSIGN_OR_RETURN(clocks_, onesided::VersionedBuffer::Create(
                                links(), absl::StrCat("ps", index_, "/clocks"),
                                2 * workers_ * sizeof(int64_t), ps_.copies));
  table_ = std::make_unique<ClockTable>(ps_.sync, workers_);
  momentum_ = at::zeros({shard.elements}, at::kFloat);
  sum_ = at::zeros({shard.elements}, at::kFloat);
  contributed_.assign(workers_, false);
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
  });
}

void PsStrategy::ApplyUpdate(const at::Tensor& gradient) {
  // SGD with momentum, as torch.optim.SGD: v = mu * v + g; p -= lr * v,
  // written straight into the next version.
  momentum_.mul_(options().momentum).add_(gradient);
  const int64_t elements = shards_[index_].elements;
  params_->Update([&](std::byte* next, const std::byte* latest) {
    at::Tensor out = FloatView(next, elements);
    at::add_out(out, FloatView(latest, elements), momentum_,
                   -options().learning_rate);
  });
  ++updates_;
}

absl::Status PsStrategy::SendParameters(int worker) {
  const size_t bytes = shards_[index_].elements * sizeof(float);
  // Not in place: the copy may be rewritten while the write is in flight,
  // so the communicator stages it (an RPC server's reply copy).
  return communicator_->Send(params_ids_[worker],
                             {params_->latest(), bytes,
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

absl::Status PsStrategy::TakeGradient(int worker) {
  ASSIGN_OR_RETURN(runtime::ReceivedTensor tensor,
                   communicator_->Recv(grad_ids_[worker]));
  const int64_t elements = shards_[index_].elements;
  const size_t expected = PushElements()[index_] * sizeof(float);
  if (tensor.bytes() != expected) {
    return absl::DataLossError(absl::StrCat(
        Where(), ": worker ", worker, " pushed ", tensor.bytes(),
        " bytes of gradient, expected ", expected));
  }
  // The gradient is read where it landed (decoded from there, with a
  // codec), then the slot goes back.
  at::Tensor gradient;
  if (codecs_.empty()) {
    gradient = FloatView(tensor.data(), elements);
  } else {
    const absl::Time begin = absl::Now();
    decoded_.zero_();
    absl::Status decoded = codecs_[index_]->AddMessage(
        absl::MakeConstSpan(tensor.data(), tensor.bytes()),
        static_cast<uint64_t>(pushes_taken_[worker]), worker,
        absl::MakeSpan(decoded_.data_ptr<float>(), static_cast<size_t>(elements)), 1.0f);
    if (!decoded.ok()) {
      return absl::Status(decoded.code(),
                          absl::StrCat(Where(), ": the push of worker ", worker, " (rank ",
                                       ps_.servers + worker, "): ", decoded.message()));
    }
    codec_stats_.decode_time += absl::Now() - begin;
    ++codec_stats_.calls;
    gradient = decoded_;
  }
  ++pushes_taken_[worker];
  const double now = absl::ToDoubleSeconds(absl::Now() - start_time_);
  if (ps_.sync.mode == SyncMode::kBsp) {
    sum_.add_(gradient);
    contributed_[worker] = true;
    table_->OnPush(worker, now);
    if (++contributions_ == workers_) {
      ApplyUpdate(sum_.div_(workers_));
      sum_.zero_();
      contributed_.assign(workers_, false);
      contributions_ = 0;
    }
  } else {
    ApplyUpdate(gradient.div(workers_));
    table_->OnPush(worker, now);
  }
  history_.push_back(table_->clocks());
  reply_due_[worker] = !ps_.pull_by_read;
  PublishClocks();
  return SendReplies();
}

absl::StatusOr<StepReport> PsStrategy::ServerStep() {
  const absl::Time begin = absl::Now();
  const absl::Time deadline = begin + options().communicator_options.timeout;
  while (true) {
    for (int i = 0; i < workers_; ++i) {
      const int w = (next_worker_ + i) % workers_;
      if (table_->clock(w) >= options().steps || contributed_[w]) continue;
      ASSIGN_OR_RETURN(bool ready, communicator_->Ready(grad_ids_[w]));
      if (!ready) continue;
      const absl::Time arrived = absl::Now();
      RETURN_IF_ERROR(TakeGradient(w));
      next_worker_ = (w + 1) % workers_;
      StepReport report;
      report.clock = updates_;
      report.min_clock = table_->min_clock();
      report.Add(StepSpan::Kind::kCommunication, begin, arrived);
      report.Add(StepSpan::Kind::kWait, begin, arrived);
      report.Add(StepSpan::Kind::kCompute, arrived, absl::Now());  // the optimizer
      return report;
    }
    if (absl::Now() > deadline) {
      // The workers it waits for: under bsp those whose gradient this step
      // still lacks, otherwise the slowest ones still running.
      std::vector<std::string> waiting;
      const int64_t slowest = table_->min_clock();
      for (int w = 0; w < workers_; ++w) {
        const int64_t clock = table_->clock(w);
        if (clock >= options().steps || contributed_[w]) continue;
        if (ps_.sync.mode != SyncMode::kBsp && clock != slowest) continue;
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
    std::this_thread::yield();  // let the workers have the CPU
  }
}

}  // namespace rdmaflow::strategies::ps
