// File: ps_worker.cc
// The parameter server's worker role: permission, pull, compute, push.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <utility>

#include "ATen/core/grad_mode.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "onesided/progress/wait_policy.h"
#include "strategies/device_tensors.h"
#include "strategies/ps/ps_strategy.h"

namespace rdmaflow::strategies::ps {
namespace {

constexpr size_t kAlign = 64;
size_t RoundUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// A region of `bytes`, on the device for device parameters.
absl::StatusOr<std::unique_ptr<rdma::MemoryRegion>> RegionFor(rdma::Transport& transport,
                                                              bool on_device, size_t bytes) {
  ASSIGN_OR_RETURN(rdma::MemoryRegion region,
                   on_device ? transport.AllocateDevice(bytes) : transport.Allocate(bytes));
  return std::make_unique<rdma::MemoryRegion>(std::move(region));
}

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
  // Device parameters: both regions are device memory (pulls land there
  // device to device, pushes leave from there into the servers' device
  // slots).
  ASSIGN_OR_RETURN(param_region_, RegionFor(transport, on_device_, total));
  ASSIGN_OR_RETURN(grad_region_, RegionFor(transport, on_device_, total));
  // The model's parameters and gradients live in registered memory from
  // now on: pulls land in them, pushes leave from them, without copies.
  {
    at::NoGradGuard no_grad;
    for (int s = 0; s < servers; ++s) {
      for (const ShardEntry& entry : shards_[s].entries) {
        at::Tensor& p = parameters_[entry.parameter].tensor;
        const size_t offset = shard_offset_[s] + entry.offset * sizeof(float);
        at::Tensor values =
            FloatsOver(param_region_->data() + offset, p.numel(), where_).view(p.sizes());
        values.copy_(p.detach());
        p.set_data(values);
        p.mutable_grad() =
            FloatsOver(grad_region_->data() + offset, p.numel(), where_).view(p.sizes());
      }
    }
    RETURN_IF_ERROR(SyncDevice("the parameters' move into their region"));
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
  // With overlap the pulls run while this worker's pushes are still on the
  // wire: on a lane of their own, they do not queue behind them (over UCX
  // TCP a read's request would wait for every byte pushed before it).
  const onesided::LaneKind lane =
      ps_.overlap ? onesided::LaneKind::kControl : onesided::LaneKind::kData;
  param_readers_.clear();
  param_readers_.resize(servers);
  size_t clock_bytes = 0;
  for (int s = 0; s < servers; ++s) {
    // The clocks first: their size says whether the server cut its shard
    // as this worker does (the same ps parameters).
    ASSIGN_OR_RETURN(auto clocks,
                     onesided::VersionedReader::Create(
                         links(), absl::StrCat("ps", s, "/clocks"), s, timeout, lane));
    if (clocks->bytes() != ClockWords(s) * sizeof(int64_t)) {
      return absl::FailedPreconditionError(absl::StrCat(
          Where(), ": server ", s, " publishes ", clocks->bytes(), " bytes of clocks, ",
          ClockWords(s) * sizeof(int64_t),
          " expected; do all ranks run with the same ps parameters (overlap, slice_bytes)?"));
    }
    clock_readers_.push_back(std::move(clocks));
    clock_bytes = std::max(clock_bytes, ClockWords(s) * sizeof(int64_t));
    for (size_t k = 0; k < slices_[s].size(); ++k) {
      const std::string name = ps_.overlap ? absl::StrCat("ps", s, "/params_", k)
                                           : absl::StrCat("ps", s, "/params");
      ASSIGN_OR_RETURN(auto reader,
                       onesided::VersionedReader::Create(links(), name, s, timeout, lane));
      if (reader->bytes() != slices_[s][k].elements * sizeof(float)) {
        return absl::FailedPreconditionError(absl::StrCat(
            Where(), ": server ", s, " publishes ", reader->bytes(), " bytes of parameters in '",
            name, "', this worker's model has ", slices_[s][k].elements * sizeof(float),
            "; do all ranks build the same model with the same ps parameters?"));
      }
      param_readers_[s].push_back(std::move(reader));
    }
  }
  ASSIGN_OR_RETURN(rdma::MemoryRegion scratch,
                   transport.Allocate(servers * RoundUp(clock_bytes)));
  clock_scratch_ = std::make_unique<rdma::MemoryRegion>(std::move(scratch));
  if (ps_.overlap) {
    // Each slice's push, in backward's order, as soon as its gradients are
    // in, one at a time (the step waits until the last has completed): a
    // notified write's flag leaves once its data is flushed (UCX), behind
    // the data of every write posted since on the lane, so slices posted
    // together would all land at the server at the end, in one burst, and
    // the server could apply none of them early.
    std::vector<std::vector<size_t>> buckets;
    for (const SliceRef& ref : push_order_) {
      buckets.push_back(slices_[ref.server][ref.slice].parameters);
    }
    ASSIGN_OR_RETURN(pipeline_,
                     BucketPipeline::Create(
                         parameters_, std::move(buckets),
                         [this](size_t b) {
                           RETURN_IF_ERROR(PushSlice(push_order_[b].server, push_order_[b].slice));
                           // The pull goes while the push does (it
                           // progresses the loop).
                           if (prefetch_region_ != nullptr) RETURN_IF_ERROR(PrefetchOne().status());
                           return WaitForPushes();
                         },
                         links().loop(), absl::StrCat(Where(), "'s pushes")));
    if (on_device_) {
      // A slice goes once torch's kernels that wrote its gradients are
      // complete: a mark on backward's stream as its last one comes in.
      const c10::Device where = where_;
      pipeline_->set_ready_marks([where](size_t) { return MarkTorchWork(where); },
                                 options().communicator_options.timeout);
    }
    if (ps_.prefetch) {
      // The next step's pulls go while this step's backward and pushes
      // still run, one slice after each push and whenever the
      // communication thread waits for backward (under bsp a slice's next
      // values are final once every worker's gradients are in).
      ASSIGN_OR_RETURN(prefetch_region_, RegionFor(transport, on_device_, total));
      prefetched_.resize(servers);
      for (int s = 0; s < servers; ++s) prefetched_[s].assign(slices_[s].size(), false);
      pipeline_->set_idle([this] { return PrefetchOne(); });
    }
  }
  return absl::OkStatus();
}

absl::Status PsStrategy::ReadClocks(int server, std::vector<int64_t>& words) {
  const size_t bytes = ClockWords(server) * sizeof(int64_t);
  const size_t offset = server * (clock_scratch_->size() / ps_.servers);
  ASSIGN_OR_RETURN(uint64_t version,
                   clock_readers_[server]->Read({clock_scratch_.get(), offset, bytes}));
  words.resize(ClockWords(server));
  std::memcpy(words.data(), clock_scratch_->data() + offset, bytes);
  // Version 0 is the zeros before the server started: no permission yet,
  // nothing held.
  if (version == 0) {
    std::fill(words.begin(), words.begin() + workers_, -1);
    std::fill(words.begin() + 2 * workers_, words.end(), -1);
  }
  return absl::OkStatus();
}

absl::Status PsStrategy::WaitForEnd() {
  absl::Time first;
  return PullWhenPermitted(kUnbounded, first).status();
}

absl::StatusOr<int64_t> PsStrategy::ReadEveryServersClocks(
    std::vector<std::vector<int64_t>>& words) {
  int64_t bound = kUnbounded;
  for (int s = 0; s < ps_.servers; ++s) {
    RETURN_IF_ERROR(ReadClocks(s, words[s]));
    bound = std::min(bound, words[s][index_]);
  }
  return bound;
}

absl::StatusOr<int64_t> PsStrategy::PullWhenPermitted(int64_t clock, absl::Time& first) {
  const absl::Time deadline = absl::Now() + options().communicator_options.timeout;
  const bool end = clock == kUnbounded;
  const int workers = workers_;
  // Slices still to pull, by server (none at the end: Finish() pulls them
  // all once every worker is done).
  std::vector<std::vector<bool>> due(ps_.servers);
  int left = 0;
  const bool prefetched = !end && prefetch_clock_ == clock;
  for (int s = 0; s < ps_.servers; ++s) {
    due[s].assign(end ? 0 : slices_[s].size(), true);
    for (size_t k = 0; k < due[s].size(); ++k) {
      if (prefetched && prefetched_[s][k]) due[s][k] = false;
      left += due[s][k] ? 1 : 0;
    }
  }
  first = absl::InfiniteFuture();
  std::vector<std::vector<int64_t>> words(ps_.servers);
  // A round that pulled nothing waits as the communicator's waits do (spin,
  // then sleep), leaving the cores to the ranks it waits for.
  onesided::IdleBackoff backoff(options().communicator_options.wait);
  while (true) {
    ASSIGN_OR_RETURN(const int64_t bound, ReadEveryServersClocks(words));
    int64_t slowest = kUnbounded;
    int slowest_server = 0;  // whose words show the slowest clock
    for (int s = 0; s < ps_.servers; ++s) {
      const int64_t low = *std::min_element(words[s].begin() + workers,
                                            words[s].begin() + 2 * workers);
      if (low < slowest) {
        slowest = low;
        slowest_server = s;
      }
    }
    // The end: every server took every gradient.
    if (end && slowest >= options().steps && bound >= 0) return slowest;
    // A slice may go into step `clock` once it holds this worker's own
    // gradients of the steps before (read-my-writes), and under bsp every
    // worker's, exactly; otherwise once the step is within the bound.
    bool pulled = false;
    for (int s = 0; s < ps_.servers; ++s) {
      for (size_t k = 0; k < due[s].size(); ++k) {
        if (!due[s][k]) continue;
        const auto row = words[s].begin() + (2 + k) * workers;
        std::vector<int64_t> held(row, row + workers);
        absl::StatusOr<bool> permitted =
            SlicePermitted(held, index_, clock, ps_.sync.mode, bound);
        if (!permitted.ok()) {
          return absl::Status(permitted.status().code(),
                              absl::StrCat(Where(), ", server ", s, " (rank ", s, ")",
                                           ps_.overlap ? absl::StrCat(", slice ", k) : "", ": ",
                                           permitted.status().message(),
                                           "; is it a server of another job, or broken?"));
        }
        if (!*permitted) continue;
        if (first == absl::InfiniteFuture()) first = absl::Now();
        if (record_pulls_) pulls_.push_back({clock, s, static_cast<int>(k), std::move(held)});
        RETURN_IF_ERROR(PullSlice(s, static_cast<int>(k), *param_region_));
        due[s][k] = false;
        --left;
        pulled = true;
      }
    }
    if (!end && left == 0) return slowest;
    if (pulled) {
      backoff.Reset();
      continue;  // read the clocks again at once
    }
    if (absl::Now() > deadline) {
      // Name who is holding us back: the slowest workers (bound too low), or
      // a server that has not taken this worker's own last gradient.
      std::string waiting_for;
      for (int s = 0; s < ps_.servers && !end; ++s) {
        for (size_t k = 0; k < due[s].size() && waiting_for.empty(); ++k) {
          const int64_t mine = words[s][(2 + k) * workers + index_];
          if (due[s][k] && mine < clock) {
            waiting_for = absl::StrCat("server ", s, " (rank ", s, ") has taken ", mine,
                                       " of this worker's gradients",
                                       ps_.overlap ? absl::StrCat(" into slice ", k) : "");
          }
        }
      }
      if (waiting_for.empty()) {
        waiting_for = absl::StrCat("the slowest: ", WorkersAt(words[slowest_server], slowest));
      }
      int total = 0;
      for (const std::vector<Slice>& server : slices_) total += server.size();
      return absl::DeadlineExceededError(absl::StrCat(
          Where(), " at clock ", end ? std::string("end") : absl::StrCat(clock), " waited ",
          absl::FormatDuration(options().communicator_options.timeout),
          " for permission (", ps_.sync.ToString(), "): ",
          ps_.sync.mode == SyncMode::kBsp ? std::string()
                                          : absl::StrCat("its bound is ", bound, " and "),
          "the workers' clocks are [",
          absl::StrJoin(words[slowest_server].begin() + workers,
                        words[slowest_server].begin() + 2 * workers, ", "),
          "]; ", waiting_for,
          end || !ps_.overlap ? "" : absl::StrCat("; it pulled ", total - left, " of ", total,
                                                  " slices"),
          "; is it stuck or dead?"));
    }
    backoff.Idle(deadline - absl::Now());
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

absl::Status PsStrategy::PullSlice(int server, int slice, rdma::MemoryRegion& into) {
  const Slice& range = slices_[server][slice];
  const size_t bytes = range.elements * sizeof(float);
  RETURN_IF_ERROR(param_readers_[server][slice]
                      ->Read({&into,
                              static_cast<size_t>(shard_offset_[server]) +
                                  range.offset * sizeof(float),
                              bytes})
                      .status());
  pulled_bytes_ += static_cast<int64_t>(bytes);
  return absl::OkStatus();
}

absl::StatusOr<bool> PsStrategy::PrefetchOne() {
  const int64_t next = clock() + 1;
  // The last step's parameters are Finish()'s to pull.
  if (next >= options().steps) return false;
  if (prefetch_clock_ != next) {
    for (std::vector<bool>& server : prefetched_) std::fill(server.begin(), server.end(), false);
    prefetch_clock_ = next;
  }
  std::vector<std::vector<int64_t>> words(ps_.servers);
  int64_t bound = kUnbounded;  // bsp has none
  bool bound_read = ps_.sync.mode == SyncMode::kBsp;
  // Only a slice this worker pushed in this step can hold its gradients.
  const size_t pushed = static_cast<size_t>(pipeline_->buckets_begun());
  for (size_t b = 0; b < pushed && b < push_order_.size(); ++b) {
    const SliceRef& ref = push_order_[b];
    if (prefetched_[ref.server][ref.slice]) continue;
    if (!bound_read) {
      // The next step's bound, once there is a slice to pull.
      ASSIGN_OR_RETURN(bound, ReadEveryServersClocks(words));
      bound_read = true;
    }
    std::vector<int64_t>& clocks = words[ref.server];
    if (clocks.empty()) RETURN_IF_ERROR(ReadClocks(ref.server, clocks));
    const auto row = clocks.begin() + (2 + ref.slice) * workers_;
    std::vector<int64_t> held(row, row + workers_);
    absl::StatusOr<bool> permitted = SlicePermitted(held, index_, next, ps_.sync.mode, bound);
    if (!permitted.ok()) {
      return absl::Status(permitted.status().code(),
                          absl::StrCat(Where(), ", server ", ref.server, " (rank ", ref.server,
                                       "), slice ", ref.slice, " of the next step: ",
                                       permitted.status().message(),
                                       "; is it a server of another job, or broken?"));
    }
    // Later slices in backward's order are complete later: stop at the
    // first one that is not.
    if (!*permitted) return false;
    if (record_pulls_) pulls_.push_back({next, ref.server, ref.slice, std::move(held), true});
    RETURN_IF_ERROR(PullSlice(ref.server, ref.slice, *prefetch_region_));
    prefetched_[ref.server][ref.slice] = true;
    prefetched_pulls_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  return false;
}

absl::Status PsStrategy::TakePrefetched() {
  if (prefetch_clock_ != clock()) return absl::OkStatus();
  at::NoGradGuard no_grad;
  for (int s = 0; s < ps_.servers; ++s) {
    for (size_t k = 0; k < prefetched_[s].size(); ++k) {
      if (!prefetched_[s][k]) continue;
      const size_t offset = shard_offset_[s] + slices_[s][k].offset * sizeof(float);
      const int64_t elements = slices_[s][k].elements;
      FloatsOver(param_region_->data() + offset, elements, where_)
          .copy_(FloatsOver(prefetch_region_->data() + offset, elements, where_));
    }
  }
  // Before the next prefetch rewrites the region (during this step).
  return SyncDevice("the prefetched parameters' copy");
}

absl::Status PsStrategy::PullParameters() {
  for (int s = 0; s < ps_.servers; ++s) {
    for (size_t k = 0; k < slices_[s].size(); ++k) {
      RETURN_IF_ERROR(PullSlice(s, static_cast<int>(k), *param_region_));
    }
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

absl::Status PsStrategy::PushSlice(int server, int slice) {
  const int64_t elements = PushElements()[server][slice];
  const size_t bytes = elements * sizeof(float);
  const int id = grad_ids_[server][slice];
  if (codecs_.empty()) {
    const size_t offset = shard_offset_[server] + slices_[server][slice].offset * sizeof(float);
    return communicator_->Send(id, {grad_region_->data() + offset, bytes, {elements}, nullptr});
  }
  // The shard's gradient (one slice) through its codec, into the push's
  // slot-sized message (a shorter message leaves padding its server
  // ignores). The last push of this region has completed (WaitForPushes()).
  const absl::Time begin = absl::Now();
  const absl::Span<const float> gradient(
      reinterpret_cast<const float*>(grad_region_->data() + shard_offset_[server]),
      static_cast<size_t>(shards_[server].elements));
  std::byte* message = message_region_->data() + message_offset_[server];
  RETURN_IF_ERROR(codecs_[server]
                      ->EncodeMessage(gradient, static_cast<uint64_t>(clock()),
                                      absl::MakeSpan(message, codecs_[server]->scratch_bytes()))
                      .status());
  codec_stats_.encode_time += absl::Now() - begin;
  // The whole slot crosses (a shorter message leaves padding).
  codec_stats_.wire_bytes += static_cast<int64_t>(bytes);
  codec_stats_.dense_bytes += shards_[server].elements * static_cast<int64_t>(sizeof(float));
  return communicator_->Send(id, {message, bytes, {elements}, nullptr});
}

absl::Status PsStrategy::PushGradients() {
  for (int s = 0; s < ps_.servers; ++s) {
    for (size_t k = 0; k < slices_[s].size(); ++k) {
      RETURN_IF_ERROR(PushSlice(s, static_cast<int>(k)));
    }
  }
  if (!codecs_.empty()) ++codec_stats_.calls;
  return absl::OkStatus();
}

absl::StatusOr<StepReport> PsStrategy::WorkerStep(const ComputeFn& compute) {
  StepReport report;
  report.clock = clock();
  const absl::Time begin = absl::Now();
  // Torch's kernels of the last step that read the parameters end before
  // a pull rewrites them (device parameters).
  RETURN_IF_ERROR(SyncDevice("the last step's kernels"));
  if (ps_.pull_by_read) {
    absl::Time first;
    ASSIGN_OR_RETURN(report.min_clock, PullWhenPermitted(clock(), first));
    report.Add(StepSpan::Kind::kWait, begin, std::min(first, absl::Now()));
    RETURN_IF_ERROR(TakePrefetched());
  } else {
    report.min_clock = -1;  // a reply says nothing of the other workers
    RETURN_IF_ERROR(ReceiveParameters());
    report.Add(StepSpan::Kind::kWait, begin, absl::Now());
  }
  RETURN_IF_ERROR(WaitForPushes());
  const absl::Time pulled = absl::Now();
  report.Add(StepSpan::Kind::kCommunication, begin, pulled);
  if (on_device_) {
    at::NoGradGuard no_grad;
    FloatsOver(grad_region_->data(), static_cast<int64_t>(grad_region_->size() / sizeof(float)),
               where_)
        .zero_();
  } else {
    std::memset(grad_region_->data(), 0, grad_region_->size());
  }
  if (pipeline_ != nullptr) {
    // Each slice pushed as soon as backward completed it, one at a time;
    // the step waits for the pushes still going when compute returns.
    ASSIGN_OR_RETURN(PipelinedStep step, pipeline_->Run(compute));
    report.compute = step.compute;
    report.Add(StepSpan::Kind::kCompute, step.compute_begin, step.compute_end);
    for (const PipelinedStep::Span& push : step.buckets) {
      report.Add(StepSpan::Kind::kCommunication, push.begin, push.end);
    }
    overlapped_pushes_ += step.overlapped;
    return report;
  }
  ASSIGN_OR_RETURN(report.compute, compute());
  // The pushes read the gradients torch's kernels wrote.
  RETURN_IF_ERROR(SyncDevice("the step's gradients"));
  const absl::Time computed = absl::Now();
  report.Add(StepSpan::Kind::kCompute, pulled, computed);
  RETURN_IF_ERROR(PushGradients());
  report.Add(StepSpan::Kind::kCommunication, computed, absl::Now());
  return report;
}

void PsStrategy::DetachParameters() {
  if (param_region_ == nullptr) return;
  try {
    at::NoGradGuard no_grad;
    for (Parameter& p : parameters_) {
      p.tensor.set_data(p.tensor.detach().clone());
      p.tensor.mutable_grad() = at::Tensor();
    }
  } catch (const std::exception& e) {
    // A device that cannot copy them (out of memory, broken): the
    // parameters may still point into the regions, which are kept
    // (leaked) rather than freed under them. Never thrown from here: the
    // destructor calls this.
    std::fprintf(stderr, "%s: the parameters could not leave their regions, kept: %s\n",
                 Where().c_str(), e.what());
    static_cast<void>(param_region_.release());
    static_cast<void>(grad_region_.release());
    static_cast<void>(prefetch_region_.release());
    return;
  }
  // The clones (and any kernel still reading the regions) end first.
  SyncDevice("the parameters' copies out of their region").IgnoreError();
  param_region_.reset();
  grad_region_.reset();
  prefetch_region_.reset();
}

}  // namespace rdmaflow::strategies::ps
