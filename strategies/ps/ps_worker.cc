// File: ps_worker.cc
// The parameter server's worker role: permission, pull, compute, push.
#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

#include "ATen/core/grad_mode.h"
#include "ATen/ops/from_blob.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "strategies/ps/ps_strategy.h"

namespace rdmaflow::strategies::ps {
namespace {

constexpr size_t kAlign = 64;
size_t RoundUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

absl::Status PsStrategy::StartWorker() {
  const int servers = ps_.servers;
  shard_offset_.assign(servers, 0);
  size_t total = 0;
  for (int s = 0; s < servers; ++s) {
    shard_offset_[s] = static_cast<int64_t>(total);
    total += RoundUp(shards_[s].elements * sizeof(float));
  }
  rdma::Transport& transport = *context().transport;
  ASSIGN_OR_RETURN(rdma::MemoryRegion params, transport.Allocate(total));
  param_region_ = std::make_unique<rdma::MemoryRegion>(std::move(params));
  ASSIGN_OR_RETURN(rdma::MemoryRegion grads, transport.Allocate(total));
  grad_region_ = std::make_unique<rdma::MemoryRegion>(std::move(grads));
  // The model's parameters and gradients live in registered memory from
  // now on: pulls land in them, pushes leave from them, without copies.
  {
    at::NoGradGuard no_grad;
    for (int s = 0; s < servers; ++s) {
      for (const ShardEntry& entry : shards_[s].entries) {
        at::Tensor& p = parameters_[entry.parameter].tensor;
        const size_t offset = shard_offset_[s] + entry.offset * sizeof(float);
        at::Tensor values = at::from_blob(
            param_region_->data() + offset, p.sizes(), at::kFloat);
        values.copy_(p.detach());
        p.set_data(values);
        p.mutable_grad() = at::from_blob(grad_region_->data() + offset,
                                            p.sizes(), at::kFloat);
      }
    }
  }
  if (!codecs_.empty()) {
    message_offset_.assign(servers, 0);
    size_t messages = 0;
    for (int s = 0; s < servers; ++s) {
      message_offset_[s] = static_cast<int64_t>(messages);
      messages += RoundUp(codecs_[s]->scratch_bytes());
    }
    ASSIGN_OR_RETURN(rdma::MemoryRegion encoded, transport.Allocate(messages));
    std::memset(encoded.data(), 0, encoded.size());
    message_region_ = std::make_unique<rdma::MemoryRegion>(std::move(encoded));
  }
  // Pushes leave from these regions in place where the communicator can.
  communicator_->AddSendArena(grad_region_.get());
  if (message_region_ != nullptr) communicator_->AddSendArena(message_region_.get());
  if (!ps_.pull_by_read) return absl::OkStatus();
  const absl::Duration timeout = options().communicator_options.timeout;
  for (int s = 0; s < servers; ++s) {
    ASSIGN_OR_RETURN(auto reader,
                     onesided::VersionedReader::Create(
                         links(), absl::StrCat("ps", s, "/params"), s, timeout));
    if (reader->bytes() != shards_[s].elements * sizeof(float)) {
      return absl::FailedPreconditionError(absl::StrCat(
          Where(), ": server ", s, " publishes ", reader->bytes(),
          " bytes of parameters, this worker's model has ",
          shards_[s].elements * sizeof(float),
          "; do all ranks build the same model?"));
    }
    param_readers_.push_back(std::move(reader));
    ASSIGN_OR_RETURN(reader, onesided::VersionedReader::Create(
                                 links(), absl::StrCat("ps", s, "/clocks"), s, timeout));
    clock_readers_.push_back(std::move(reader));
  }
  ASSIGN_OR_RETURN(rdma::MemoryRegion scratch,
                   transport.Allocate(servers * RoundUp(2 * workers_ * sizeof(int64_t))));
  clock_scratch_ = std::make_unique<rdma::MemoryRegion>(std::move(scratch));
  return absl::OkStatus();
}

absl::Status PsStrategy::ReadClocks(int server, std::vector<int64_t>& words) {
  const size_t bytes = 2 * workers_ * sizeof(int64_t);
  const size_t offset = server * RoundUp(bytes);
  ASSIGN_OR_RETURN(uint64_t version,
                   clock_readers_[server]->Read({clock_scratch_.get(), offset, bytes}));
  words.resize(2 * workers_);
  std::memcpy(words.data(), clock_scratch_->data() + offset, bytes);
  // Version 0 is the zeros before the server started: no permission yet.
  if (version == 0) std::fill(words.begin(), words.begin() + workers_, -1);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> PsStrategy::WaitForPermission(int64_t clock) {
  const absl::Time deadline = absl::Now() + options().communicator_options.timeout;
  std::vector<int64_t> words;
  while (true) {
    int64_t bound = kUnbounded;
    int64_t slowest = kUnbounded;
    int64_t mine = kUnbounded;  // our gradients the servers applied
    int lagging_server = -1;    // one that has not applied them all
    for (int s = 0; s < ps_.servers; ++s) {
      RETURN_IF_ERROR(ReadClocks(s, words));
      bound = std::min(bound, words[index_]);
      if (words[workers_ + index_] < mine) {
        mine = words[workers_ + index_];
        if (mine < clock) lagging_server = s;
      }
      slowest = std::min(slowest, *std::min_element(words.begin() + workers_,
                                                    words.end()));
    }
    // kUnbounded asks for the end: every server took every gradient.
    // Otherwise the clock must be within the bound, and the parameters must
    // hold this worker's own gradients (read-my-writes, as in SSP).
    const bool go = clock == kUnbounded ? slowest >= options().steps && bound >= 0
                                        : clock <= bound && mine >= clock;
    if (go) return slowest;
    if (absl::Now() > deadline) {
      // Name who is holding us back: the slowest workers (bound too low), or
      // a server that has not applied our own last gradient.
      std::string waiting_for = absl::StrCat("the slowest: ", WorkersAt(words, slowest));
      if (clock != kUnbounded && clock <= bound && lagging_server >= 0) {
        waiting_for = absl::StrCat("server ", lagging_server, " (rank ", lagging_server,
                                   ") has applied ", mine, " of this worker's gradients");
      }
      return absl::DeadlineExceededError(absl::StrCat(
          Where(), " at clock ",
          clock == kUnbounded ? std::string("end") : absl::StrCat(clock), " waited ",
          absl::FormatDuration(options().communicator_options.timeout),
          " for permission (", ps_.sync.ToString(), "): its bound is ", bound,
          " and the workers' clocks are [",
          absl::StrJoin(words.begin() + workers_, words.end(), ", "), "]; ",
          waiting_for, "; is it stuck or dead?"));
    }
    std::this_thread::yield();  // let the slower ranks have the CPU
  }
}

std::string PsStrategy::WorkersAt(const std::vector<int64_t>& words, int64_t clock) const {
  std::vector<std::string> names;
  for (int w = 0; w < workers_; ++w) {
    if (words[workers_ + w] == clock) {
      names.push_back(absl::StrCat("worker ", w, " (rank ", ps_.servers + w, ")"));
    }
  }
  return absl::StrCat(absl::StrJoin(names, ", "), " at clock ", clock);
}

absl::Status PsStrategy::PullParameters() {
  for (int s = 0; s < ps_.servers; ++s) {
    RETURN_IF_ERROR(param_readers_[s]
                        ->Read({param_region_.get(),
                                static_cast<size_t>(shard_offset_[s]),
                                shards_[s].elements * sizeof(float)})
                        .status());
    pulled_bytes_ += shards_[s].elements * sizeof(float);
  }
  return absl::OkStatus();
}

absl::Status PsStrategy::ReceiveParameters() {
  for (int s = 0; s < ps_.servers; ++s) {
    ASSIGN_OR_RETURN(runtime::ReceivedTensor tensor,
                     communicator_->Recv(params_ids_[s]));
    const size_t bytes = shards_[s].elements * sizeof(float);
    if (tensor.bytes() != bytes) {
      return absl::DataLossError(absl::StrCat(
          Where(), ": server ", s, " sent ", tensor.bytes(),
          " bytes of parameters, expected ", bytes));
    }
    std::memcpy(param_region_->data() + shard_offset_[s], tensor.data(), bytes);
  }
  return absl::OkStatus();
}

absl::Status PsStrategy::WaitForPushes() {
  absl::Status done = communicator_->WaitSendsDone();
  if (done.ok()) return done;
  return absl::Status(done.code(), absl::StrCat(Where(), ": waiting for its last pushes before "
                                                "reusing their memory: ", done.message()));
}

absl::Status PsStrategy::PushGradients() {
  const std::vector<int64_t> push = PushElements();
  for (int s = 0; s < ps_.servers; ++s) {
    const size_t bytes = push[s] * sizeof(float);
    if (codecs_.empty()) {
      RETURN_IF_ERROR(communicator_->Send(
          grad_ids_[s], {grad_region_->data() + shard_offset_[s], bytes, {push[s]}, nullptr}));
      continue;
    }
    // The shard's gradient through its codec, into the push's slot-sized
    // message (a shorter message leaves padding its server ignores). The
    // last push of this region has completed (WaitForPushes()).
    const absl::Time begin = absl::Now();
    const absl::Span<const float> gradient(
        reinterpret_cast<const float*>(grad_region_->data() + shard_offset_[s]),
        static_cast<size_t>(shards_[s].elements));
    std::byte* message = message_region_->data() + message_offset_[s];
    RETURN_IF_ERROR(codecs_[s]
                        ->EncodeMessage(gradient, static_cast<uint64_t>(clock()),
                                        absl::MakeSpan(message, codecs_[s]->scratch_bytes()))
                        .status());
    codec_stats_.encode_time += absl::Now() - begin;
    // The whole slot crosses (a shorter message leaves padding).
    codec_stats_.wire_bytes += static_cast<int64_t>(bytes);
    codec_stats_.dense_bytes += shards_[s].elements * static_cast<int64_t>(sizeof(float));
    RETURN_IF_ERROR(communicator_->Send(grad_ids_[s], {message, bytes, {push[s]}, nullptr}));
  }
  if (!codecs_.empty()) ++codec_stats_.calls;
  return absl::OkStatus();
}

absl::StatusOr<StepReport> PsStrategy::WorkerStep(const ComputeFn& compute) {
  StepReport report;
  report.clock = clock();
  const absl::Time begin = absl::Now();
  if (ps_.pull_by_read) {
    ASSIGN_OR_RETURN(report.min_clock, WaitForPermission(clock()));
    report.Add(StepSpan::Kind::kWait, begin, absl::Now());
    RETURN_IF_ERROR(PullParameters());
  } else {
    report.min_clock = -1;  // a reply says nothing of the other workers
    RETURN_IF_ERROR(ReceiveParameters());
    report.Add(StepSpan::Kind::kWait, begin, absl::Now());
  }
  RETURN_IF_ERROR(WaitForPushes());
  const absl::Time pulled = absl::Now();
  report.Add(StepSpan::Kind::kCommunication, begin, pulled);
  std::memset(grad_region_->data(), 0, grad_region_->size());
  ASSIGN_OR_RETURN(report.compute, compute());
  const absl::Time computed = absl::Now();
  report.Add(StepSpan::Kind::kCompute, pulled, computed);
  RETURN_IF_ERROR(PushGradients());
  report.Add(StepSpan::Kind::kCommunication, computed, absl::Now());
  return report;
}

void PsStrategy::DetachParameters() {
  if (param_region_ == nullptr) return;
  at::NoGradGuard no_grad;
  for (Parameter& p : parameters_) {
    p.tensor.set_data(p.tensor.detach().clone());
    p.tensor.mutable_grad() = at::Tensor();
  }
  param_region_.reset();
  grad_region_.reset();
}

}  // namespace rdmaflow::strategies::ps
