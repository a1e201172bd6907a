// File: executor.cc
// -----------------------------------------------------------------------------
// The executor's data path: Send (static and dynamic), Recv, FinishStep and
// Shutdown. Set-up is in executor_setup.cc, the progress engine in
// executor_progress.cc.
#include "runtime/executor.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/annotate.h"
#include "common/status_macros.h"
#include "graph_analyzer/shape_util.h"
#include "onesided/slots/credit_check.h"
#include "runtime/communicator_checks.h"
#include "runtime/step_tracker.h"

namespace rdmaflow::runtime {
namespace {

// How long a receive that gave up on a read waits for the read's
// completion or cancellation (ProgressEngine::Fence: the peer severed at
// once on links of the engine's own, half-way on shared ones) before it
// leaves the destination to the completion.
constexpr absl::Duration kFenceWait = absl::Seconds(5);

}  // namespace

// --- Checks of peer-written words -----------------------------------------

namespace internal {

absl::StatusOr<DynamicMetadata> CheckDynamicMetadata(
    const TransferInfo& info, absl::Span<const uint64_t> words, uint64_t seq,
    uint64_t source_pool_bytes) {
  auto corrupt = [&](auto&&... why) {
    return absl::DataLossError(absl::StrCat(
        info.Describe(), ": the metadata rank ", info.src_rank,
        " wrote for its tensor ", seq, " (counting from 0) is corrupt (", why...,
        "); do both ranks run the same plan?"));
  };
  const size_t rank = static_cast<size_t>(info.spec.shape_size());
  if (words.size() != kMetadataHeaderWords + rank) {
    return absl::InternalError(absl::StrCat(
        info.Describe(), ": ", words.size(), " metadata words for a rank-",
        rank, " tensor"));
  }
  if (words[0] != seq + 1) {
    return corrupt("sequence ", words[0], ", expected ", seq + 1);
  }
  if (words[3] != static_cast<uint64_t>(info.src_rank)) {
    return corrupt("written by rank ", words[3]);
  }
  DynamicMetadata metadata;
  for (size_t d = 0; d < rank; ++d) {
    // A word above 2^63 reads as a negative dimension: CheckShape refuses it.
    metadata.shape.push_back(static_cast<int64_t>(words[kMetadataHeaderWords + d]));
  }
  absl::StatusOr<uint64_t> bytes = CheckShape(info, metadata.shape);
  if (!bytes.ok()) {
    absl::string_view why = bytes.status().message();
    absl::ConsumePrefix(&why, absl::StrCat(info.Describe(), ": "));
    return corrupt(why);
  }
  if (words[1] != *bytes) {
    return corrupt(words[1], " bytes for shape ",
                   graph::ShapeString(metadata.shape), ", which has ", *bytes);
  }
  // Overflow-safe: offset + bytes <= pool, without forming the sum.
  if (*bytes > source_pool_bytes || words[2] > source_pool_bytes - *bytes) {
    return corrupt(*bytes, " bytes at source offset ", words[2],
                   " lie outside rank ", info.src_rank, "'s pool of ",
                   source_pool_bytes, " bytes");
  }
  metadata.bytes = *bytes;
  metadata.source_offset = words[2];
  return metadata;
}

absl::StatusOr<DynamicMetadata> ReadDynamicMetadata(const TransferInfo& info,
                                                    const std::byte* slot, uint64_t seq,
                                                    uint64_t source_pool_bytes) {
  // The sender may rewrite these words at any moment: nothing in them is
  // used but the copy CheckDynamicMetadata accepted.
  std::vector<uint64_t> words(kMetadataHeaderWords + info.spec.shape_size());
  std::memcpy(words.data(), slot, words.size() * sizeof(uint64_t));
  return CheckDynamicMetadata(info, words, seq, source_pool_bytes);
}

absl::Status CheckCredit(const TransferInfo& info, uint64_t credit,
                         uint64_t previous, uint64_t sent) {
  return onesided::CheckCredit(absl::StrCat(info.Describe(), ": rank ", info.dst_rank),
                               "tensors", credit, previous, sent);
}

absl::Status RefreshCredit(SendSlot& slot) {
  const uint64_t credit = slot.LoadCredit();  // once: the receiver may rewrite it
  if (credit == slot.credit_seen) return absl::OkStatus();
  RETURN_IF_ERROR(CheckCredit(slot.info, credit, slot.credit_seen, slot.next_seq));
  slot.credit_seen = credit;
  return absl::OkStatus();
}

absl::Status CheckArrival(const TransferInfo& info, int stage,
                          uint64_t arrived, uint64_t released) {
  const uint64_t depth = static_cast<uint64_t>(info.depth);
  if (static_cast<uint64_t>(stage) != arrived % depth) {
    return absl::DataLossError(absl::StrCat(
        info.Describe(), ": rank ", info.src_rank,
        " notified a write into stage ", stage, " where stage ",
        arrived % depth, " was due"));
  }
  // released <= arrived always: the sum cannot wrap in practice, but compare
  // without forming it anyway.
  if (arrived - released >= depth) {
    return absl::DataLossError(absl::StrCat(
        info.Describe(), ": rank ", info.src_rank, " wrote its tensor ", arrived,
        " while tensor ", released, " is still held (pipeline depth ", depth,
        "): it ignored the credits"));
  }
  return absl::OkStatus();
}

}  // namespace internal

// What a completion callback of a read reports back to the waiting Recv
// (shared: the callback may outlive the receive, and the executor).
struct Executor::PendingRead {
  bool done = false;
  absl::Status status;
  size_t dest = 0;
  // Set when the receive gave up before the completion fired: the
  // destination stays allocated until it does, and `keep` holds the pool's
  // region even past the executor (deliberately leaked if it never fires).
  bool abandoned = false;
  std::shared_ptr<rdma::MemoryRegion>* keep = nullptr;
};

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(
    const plan::TransferPlan& plan, rdma::Transport& transport,
    rdma::Store& store, const CommunicatorOptions& options) {
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the communicator timeout must be positive");
  }
  if (options.trace_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trace_steps must be 0 (off) or positive, not ", options.trace_steps));
  }
  ASSIGN_OR_RETURN(RankPlan rank_plan, RankPlan::Create(plan, transport.rank()));
  RETURN_IF_ERROR(CheckDeviceSources(rank_plan));
  CommunicatorOptions effective = options;
  if (!options.lockstep) effective.trace_steps = 0;  // tracing needs steps
  std::unique_ptr<Executor> executor(
      new Executor(std::move(rank_plan), transport, store, effective));
  absl::Status status = executor->engine_.Connect(executor->rank_plan_.peers());
  if (status.ok()) status = executor->SetUpGeneration();
  if (!status.ok()) {
    // Half set up: nothing to drain, and no barrier the peers would meet
    // (the caller gets the error; the destructor has nothing to report).
    executor->shut_down_ = true;
    return status;
  }
  return executor;
}

Executor::Executor(RankPlan rank_plan, rdma::Transport& transport,
                   rdma::Store& store, const CommunicatorOptions& options)
    : rank_plan_(std::move(rank_plan)),
      transport_(transport),
      options_(options),
      dirty_(std::make_shared<std::atomic<int>>(0)),
      trace_(rank_plan_.rank(), !options.trace_path.empty()),
      engine_(transport, store, options, rank_plan_.world_size()) {
  engine_.set_handlers(
      {[this](const rdma::Notification& n) { OnNotification(n); },
       [this] { OnRound(); }});
}

Executor::~Executor() {
  absl::Status status = Shutdown();
  if (!status.ok()) {
    std::fprintf(stderr, "rdmaflow: rank %d: executor shutdown: %s\n",
                 rank_plan_.rank(), status.ToString().c_str());
  }
  // Collect what is in flight (or give up on it) before any memory goes.
  engine_.Close();
  // A write whose completion never came may still read its source: the
  // staging it reads stays allocated (leaked, said here), never reused.
  bool meta_busy = false;
  for (auto& slot : sends_) {
    bool staged_busy = false;
    for (int stage = 0; stage < slot->info.depth; ++stage) {
      staged_busy |= slot->staging_busy[stage];
      meta_busy |= slot->meta_busy[stage];
    }
    if (staged_busy && slot->staging != nullptr) {
      std::fprintf(stderr,
                   "rdmaflow: rank %d: a write of %s never completed; its staging stays "
                   "allocated\n",
                   rank_plan_.rank(), slot->info.Describe().c_str());
      slot->staging.release();
    }
  }
  if (meta_busy && meta_out_ != nullptr) {
    std::fprintf(stderr,
                 "rdmaflow: rank %d: a dynamic tensor's metadata write never completed; its "
                 "staging stays allocated\n",
                 rank_plan_.rank());
    meta_out_.release();
  }
}

void Executor::AddSendArena(const rdma::MemoryRegion* region) {
  send_arenas_.push_back(region);
}

absl::Status Executor::WaitSendsDone() {
  RETURN_IF_ERROR(CheckUsable());
  return engine_.WaitUntil([&] { return in_place_sends_ == 0; }, -1, [&] {
    std::string blocker;
    if (!deferred_.empty()) {
      blocker = absl::StrCat(" (", BlockerOf(*deferred_.front(), deferred_.front()->pending->seq),
                             ")");
    }
    return absl::StrCat(in_place_sends_, " writes from the caller's memory still running",
                        blocker);
  });
}

std::vector<std::string> Executor::promoted() const { return promoted_; }

absl::Status Executor::CheckUsable() const {
  RETURN_IF_ERROR(CheckNotShutDown(shut_down_, rank_plan_.rank()));
  return engine_.failure();
}

absl::Status Executor::CheckSequence(uint64_t next_seq, const TransferInfo& info,
                                     const char* verb) const {
  if (!options_.lockstep) return absl::OkStatus();
  const uint64_t due = static_cast<uint64_t>(step_ - generation_start_step_);
  if (next_seq == due) return absl::OkStatus();
  return AlreadyMovedError(info, step_, verb);
}

void Executor::Observe(const TransferInfo& info,
                       const std::vector<int64_t>& shape) {
  if (options_.trace_steps == 0 || generation_ > 0 ||
      step_ >= options_.trace_steps) {
    return;
  }
  for (auto& [tensor, shapes] : observed_) {
    if (tensor != info.tensor) continue;
    // A tensor sent to several ranks is observed once per step.
    if (static_cast<int64_t>(shapes.size()) <= step_) shapes.push_back(shape);
    return;
  }
  observed_.emplace_back(info.tensor,
                         std::vector<std::vector<int64_t>>{shape});
}

// --- Send -------------------------------------------------------------------

bool Executor::StageFree(const internal::SendSlot& slot, uint64_t seq) const {
  return slot.released() + slot.info.depth > seq;
}

bool Executor::SharedMemoryFree(const internal::SendSlot& slot,
                                uint64_t seq) const {
  const uint64_t depth = slot.info.depth;
  for (const auto& [other, precedes] : slot.overlaps) {
    const uint64_t released = other->released();
    if (precedes ? released <= seq : released + depth <= seq) return false;
  }
  return true;
}

std::string Executor::BlockerOf(const internal::SendSlot& slot,
                                uint64_t seq) const {
  const uint64_t depth = slot.info.depth;
  const int64_t base = generation_start_step_;
  if (!StageFree(slot, seq)) {
    return absl::StrCat(
        "rank ", slot.info.dst_rank, " still holds step ",
        base + slot.released(), " of ", slot.info.Describe(),
        " (pipeline depth ", depth,
        "); is it receiving, and dropping received tensors?");
  }
  for (const auto& [other, precedes] : slot.overlaps) {
    const uint64_t released = other->released();
    if (precedes ? released <= seq : released + depth <= seq) {
      return absl::StrCat("rank ", slot.info.dst_rank, " still holds step ",
                          base + released, " of ", other->info.Describe(),
                          ", whose memory ", slot.info.Describe(),
                          " shares; is it receiving in schedule order?");
    }
  }
  return absl::StrCat("nothing blocks ", slot.info.Describe());
}

absl::Status Executor::PostOrDefer(internal::SendSlot& slot,
                                   internal::SendSlot::PendingWrite write) {
  if (!SharedMemoryFree(slot, write.seq)) {
    slot.pending = std::move(write);
    deferred_.push_back(&slot);
    return absl::OkStatus();
  }
  return engine_.Post(
      [&] {
        return slot.endpoint->PostWrite(write.src, write.dst,
                                        write.notification, write.done);
      },
      slot.info.dst_rank,
      [&] { return absl::StrCat("posting ", slot.info.Describe()); });
}

void Executor::PostDeferred() {
  size_t kept = 0;
  for (internal::SendSlot* slot : deferred_) {
    internal::SendSlot::PendingWrite& write = *slot->pending;
    if (!SharedMemoryFree(*slot, write.seq)) {
      deferred_[kept++] = slot;
      continue;
    }
    absl::Status posted = slot->endpoint->PostWrite(
        write.src, write.dst, write.notification, write.done);
    if (absl::IsResourceExhausted(posted)) {
      deferred_[kept++] = slot;
      continue;
    }
    // A write that will never run still releases what it held and reports
    // its error through its callback.
    engine_.Started(slot->info.dst_rank);
    if (!posted.ok()) write.done(posted);
    slot->pending.reset();
  }
  deferred_.resize(kept);
}

absl::Status Executor::RefreshCredit(internal::SendSlot& slot) {
  absl::Status valid = internal::RefreshCredit(slot);
  if (!valid.ok()) engine_.Fail(valid);
  return valid;
}

absl::Status Executor::WaitForSlot(internal::SendSlot& slot, uint64_t seq) {
  RETURN_IF_ERROR(RefreshCredit(slot));
  // One deferred write per slot at a time.
  if (StageFree(slot, seq) && !slot.pending.has_value()) {
    return absl::OkStatus();
  }
  const absl::Time begin = absl::Now();
  absl::Status status = engine_.WaitUntil(
      [&] { return StageFree(slot, seq) && !slot.pending.has_value(); },
      slot.info.dst_rank, [&] {
        return slot.pending.has_value() ? BlockerOf(slot, seq - 1)
                                        : BlockerOf(slot, seq);
      });
  const absl::Time end = absl::Now();
  counters_.send_wait += end - begin;
  trace_.Add(TraceRecorder::Lane::kWait, slot.info.tensor, begin, end,
             slot.info.dst_rank, step_, 0);
  return status;
}

absl::StatusOr<rdma::LocalSlice> Executor::SourceOf(
    internal::SendSlot& slot, const OutgoingTensor& tensor, int stage) {
  const size_t bytes = tensor.bytes;
  for (const rdma::MemoryRegion* arena : send_arenas_) {
    if (tensor.data >= arena->data() &&
        tensor.data + bytes <= arena->data() + arena->size()) {
      return rdma::LocalSlice{
          arena, static_cast<size_t>(tensor.data - arena->data()), bytes};
    }
  }
  if (slot.info.device_source) {
    return absl::FailedPreconditionError(absl::StrCat(
        slot.info.Describe(), " is device memory outside every send arena: the executor "
        "does not copy device memory; produce the tensor in a region from "
        "Transport::AllocateDevice given to AddSendArena"));
  }
  // Not registered: one copy into this slot's staging buffer.
  if (slot.staging == nullptr) {
    ASSIGN_OR_RETURN(rdma::MemoryRegion staging,
                     transport_.Allocate(slot.info.slot_bytes * slot.info.depth));
    slot.staging = std::make_unique<rdma::MemoryRegion>(std::move(staging));
  }
  if (slot.staging_busy[stage]) {
    RETURN_IF_ERROR(engine_.WaitUntil([&] { return !slot.staging_busy[stage]; },
                              slot.info.dst_rank, [&] {
                                return absl::StrCat("the previous write of ",
                                                    slot.info.Describe(),
                                                    " never completed");
                              }));
  }
  const size_t offset = stage * slot.info.slot_bytes;
  std::memcpy(slot.staging->data() + offset, tensor.data, bytes);
  slot.staging_busy[stage] = true;
  ++counters_.copies;
  counters_.bytes_copied += bytes;
  return rdma::LocalSlice{slot.staging.get(), offset, bytes};
}

absl::Status Executor::Send(int id, OutgoingTensor tensor) {
  RETURN_IF_ERROR(CheckUsable());
  ASSIGN_OR_RETURN(SendArguments args, CheckSendArguments(rank_plan_, id, tensor,
                                                          options_.dynamic_pool_bytes));
  internal::SendSlot& slot = *sends_[send_by_id_[args.info->id]];
  RETURN_IF_ERROR(CheckSequence(slot.next_seq, slot.info, "sent"));
  if (slot.info.dynamic) return SendDynamic(slot, std::move(tensor));
  return SendStatic(slot, std::move(tensor));
}

absl::Status Executor::SendStatic(internal::SendSlot& slot,
                                  OutgoingTensor tensor) {
  const uint64_t seq = slot.next_seq;
  const int stage = static_cast<int>(seq % slot.info.depth);
  RETURN_IF_ERROR(WaitForSlot(slot, seq));
  ASSIGN_OR_RETURN(rdma::LocalSlice src, SourceOf(slot, tensor, stage));
  const bool staged = src.region == slot.staging.get();
  if (staged) tensor.keepalive.reset();  // copied: the caller's memory is free
  const rdma::RemoteSlice dst{
      slot.remote, stage * slot.info.stage_bytes + slot.info.offset,
      tensor.bytes};
  const absl::Time begin = absl::Now();
  const int64_t step = step_;
  std::shared_ptr<const void> keep = std::move(tensor.keepalive);
  auto done = [this, alive = std::weak_ptr<int>(alive_), s = &slot, stage, staged, begin,
               step, keep](absl::Status status) {
    // A completion that comes back after the executor went (the engine's
    // fence gave up on it) touches nothing; `keep` goes with the callback.
    if (alive.expired()) return;
    engine_.Completed(s->info.dst_rank);
    if (staged) s->staging_busy[stage] = false;
    if (!staged) --in_place_sends_;
    if (!status.ok()) {
      engine_.Fail(Annotate(status, absl::StrCat("writing step ", step, " of ",
                                         s->info.Describe())));
    }
    trace_.Add(TraceRecorder::Lane::kSend, s->info.tensor, begin, absl::Now(),
               s->info.dst_rank, step, s->info.data_bytes);
  };
  internal::SendSlot::PendingWrite write{
      seq, src, dst,
      internal::EncodeNotification(slot.info.slot_index, stage),
      std::move(done)};
  if (!staged) ++in_place_sends_;
  absl::Status posted = PostOrDefer(slot, std::move(write));
  if (!posted.ok()) {
    if (staged) slot.staging_busy[stage] = false;
    if (!staged) --in_place_sends_;  // not accepted: `done` will not run
    return Annotate(posted, absl::StrCat("sending ", slot.info.Describe()));
  }
  ++slot.next_seq;
  ++counters_.tensors_sent;
  counters_.bytes_sent += tensor.bytes;
  return absl::OkStatus();
}

void Executor::FreeSources(internal::SendSlot& slot) {
  const uint64_t released = slot.released();
  while (!slot.sources.empty() && slot.sources.front().first < released) {
    source_pool_->Free(slot.sources.front().second);
    slot.sources.pop_front();
  }
}

absl::Status Executor::SendDynamic(internal::SendSlot& slot,
                                   OutgoingTensor tensor) {
  const uint64_t seq = slot.next_seq;
  const int stage = static_cast<int>(seq % slot.info.depth);
  Observe(slot.info, tensor.shape);
  RETURN_IF_ERROR(WaitForSlot(slot, seq));
  FreeSources(slot);
  size_t source = 0;
  if (tensor.bytes > 0) {
    // Send() checked it fits the pool (CheckSendArguments).
    absl::StatusOr<size_t> allocated = source_pool_->Allocate(tensor.bytes);
    if (!allocated.ok()) {
      RETURN_IF_ERROR(engine_.WaitUntil(
          [&] {
            for (auto& s : sends_) {
              if (s->info.dynamic) FreeSources(*s);
            }
            allocated = source_pool_->Allocate(tensor.bytes);
            return allocated.ok();
          },
          slot.info.dst_rank, [&] {
            return absl::StrCat(slot.info.Describe(), ": ",
                                allocated.status().message(),
                                "; receivers still hold the rest");
          }));
    }
    source = *allocated;
    std::memcpy(source_pool_region_->data() + source, tensor.data, tensor.bytes);
    ++counters_.copies;
    counters_.bytes_copied += tensor.bytes;
    slot.sources.emplace_back(seq, source);
  }
  tensor.keepalive.reset();
  if (slot.meta_busy[stage]) {
    RETURN_IF_ERROR(engine_.WaitUntil([&] { return !slot.meta_busy[stage]; },
                              slot.info.dst_rank, [&] {
                                return absl::StrCat("the previous metadata of ",
                                                    slot.info.Describe(),
                                                    " never completed");
                              }));
  }
  const size_t meta_offset = slot.meta_offset + stage * slot.info.slot_bytes;
  std::vector<uint64_t> words = {seq + 1, tensor.bytes, source,
                                 static_cast<uint64_t>(rank_plan_.rank())};
  for (int64_t d : tensor.shape) words.push_back(static_cast<uint64_t>(d));
  const size_t meta_bytes = words.size() * sizeof(uint64_t);
  std::memcpy(meta_out_->data() + meta_offset, words.data(), meta_bytes);
  slot.meta_busy[stage] = true;
  const rdma::LocalSlice src{meta_out_.get(), meta_offset, meta_bytes};
  const rdma::RemoteSlice dst{
      slot.remote, stage * slot.info.stage_bytes + slot.info.offset, meta_bytes};
  const absl::Time begin = absl::Now();
  const int64_t step = step_;
  const uint64_t bytes = tensor.bytes;
  auto done = [this, alive = std::weak_ptr<int>(alive_), s = &slot, stage, begin, step,
               bytes](absl::Status status) {
    if (alive.expired()) return;  // the executor went first (see SendStatic)
    engine_.Completed(s->info.dst_rank);
    s->meta_busy[stage] = false;
    if (!status.ok()) {
      engine_.Fail(Annotate(status, absl::StrCat("publishing step ", step, " of ",
                                         s->info.Describe())));
    }
    trace_.Add(TraceRecorder::Lane::kSend, s->info.tensor, begin, absl::Now(),
               s->info.dst_rank, step, bytes);
  };
  internal::SendSlot::PendingWrite write{
      seq, src, dst,
      internal::EncodeNotification(slot.info.slot_index, stage),
      std::move(done)};
  absl::Status posted = PostOrDefer(slot, std::move(write));
  if (!posted.ok()) {
    slot.meta_busy[stage] = false;
    return Annotate(posted, absl::StrCat("sending ", slot.info.Describe()));
  }
  ++slot.next_seq;
  ++counters_.tensors_sent;
  counters_.bytes_sent += bytes;
  return absl::OkStatus();
}

// --- Recv -------------------------------------------------------------------

absl::StatusOr<ReceivedTensor> Executor::Recv(int id) {
  RETURN_IF_ERROR(CheckUsable());
  ASSIGN_OR_RETURN(const TransferInfo* info, rank_plan_.FindRecv(id));
  std::shared_ptr<internal::RecvSlot> slot = recvs_[recv_by_id_[info->id]];
  RETURN_IF_ERROR(CheckSequence(slot->next_seq, slot->info, "received"));
  const uint64_t seq = slot->next_seq;
  const int stage = static_cast<int>(seq % slot->info.depth);
  const absl::Time begin = absl::Now();
  if (slot->arrived <= seq) {
    RETURN_IF_ERROR(engine_.WaitUntil(
        [&] { return slot->arrived > seq; }, slot->info.src_rank, [&] {
          return absl::StrCat("rank ", slot->info.src_rank,
                              " has not delivered step ", step_, " of ",
                              slot->info.Describe());
        }));
    counters_.recv_wait += absl::Now() - begin;
  }
  ReceivedTensor out;
  if (slot->info.dynamic) {
    ASSIGN_OR_RETURN(out, RecvDynamic(slot, stage));
  } else {
    std::vector<int64_t> shape(slot->info.spec.shape().begin(),
                               slot->info.spec.shape().end());
    out = ReceivedTensor(
        slot->region->data() + stage * slot->info.stage_bytes + slot->info.offset,
        slot->info.data_bytes, std::move(shape),
        std::make_unique<internal::SlotLease>(slot, stage), slot->info.device);
  }
  ++slot->next_seq;
  ++counters_.tensors_received;
  counters_.bytes_received += out.bytes();
  trace_.Add(TraceRecorder::Lane::kRecv, slot->info.tensor, begin, absl::Now(),
             slot->info.src_rank, step_, out.bytes());
  return out;
}

absl::StatusOr<ReceivedTensor> Executor::RecvDynamic(
    const std::shared_ptr<internal::RecvSlot>& slot, int stage) {
  const TransferInfo& info = slot->info;
  const uint64_t seq = slot->next_seq;
  const std::byte* meta =
      slot->region->data() + stage * info.stage_bytes + info.offset;
  absl::StatusOr<internal::DynamicMetadata> metadata =
      internal::ReadDynamicMetadata(info, meta, seq, slot->source_pool->length);
  if (!metadata.ok()) {
    // The link can no longer be trusted: the executor stops here.
    absl::Status error = Annotate(
        metadata.status(), absl::StrCat("rank ", rank_plan_.rank(), ", step ", step_));
    engine_.Fail(error);
    return error;
  }
  const uint64_t bytes = metadata->bytes;
  std::vector<int64_t> shape = std::move(metadata->shape);
  Observe(info, shape);
  if (bytes == 0) {
    return ReceivedTensor(nullptr, 0, std::move(shape),
                          std::make_unique<internal::SlotLease>(slot, stage));
  }
  if (bytes > dest_pool_->capacity()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        info.Describe(), ": ", bytes, " bytes exceed the dynamic pool of ",
        dest_pool_->capacity(), " bytes; raise dynamic_pool_bytes"));
  }
  absl::StatusOr<size_t> dest = dest_pool_->Allocate(bytes);
  if (!dest.ok()) {
    RETURN_IF_ERROR(engine_.WaitUntil(
        [&] {
          dest = dest_pool_->Allocate(bytes);
          return dest.ok();
        },
        info.src_rank, [&] {
          return absl::StrCat(info.Describe(), ": ", dest.status().message(),
                              "; drop received dynamic tensors sooner");
        }));
  }
  // Until a lease takes it (on success), the destination is ours to free,
  // and only once no read can still land in it.
  auto read = std::make_shared<PendingRead>();
  read->dest = *dest;
  const absl::Time begin = absl::Now();
  absl::Status posted = engine_.Post(
      [&] {
        return slot->endpoint->PostRead(
            {dest_pool_region_.get(), *dest, bytes},
            {slot->source_pool, metadata->source_offset, bytes},
            [this, alive = std::weak_ptr<int>(alive_), read,
             peer = slot->info.src_rank](absl::Status status) {
              read->done = true;
              read->status = std::move(status);
              if (alive.expired()) return;  // `keep` stays: see PendingRead
              engine_.Completed(peer);
              if (read->abandoned) {
                dest_pool_->Free(read->dest);
                delete read->keep;
                read->keep = nullptr;
              }
            });
      },
      info.src_rank, [&] { return absl::StrCat("posting the read of ", info.Describe()); });
  if (!posted.ok()) {
    dest_pool_->Free(*dest);  // never posted: nothing can land
    return Annotate(posted, absl::StrCat("reading ", info.Describe()));
  }
  absl::Status waited = engine_.WaitUntil(
      [&] { return read->done; }, info.src_rank, [&] {
        return absl::StrCat("rank ", info.src_rank, " has not served the read of step ",
                            step_, " of ", info.Describe(), " (", bytes, " bytes)");
      });
  if (!waited.ok()) {
    AbandonRead(read, info.src_rank, waited);
    return waited;
  }
  if (!read->status.ok()) {
    // The completion fired: nothing lands in the destination any more.
    dest_pool_->Free(*dest);
    absl::Status error = Annotate(
        read->status, absl::StrCat("reading step ", step_, " of ", info.Describe()));
    engine_.Fail(error);
    return error;
  }
  slot->dest[stage] = *dest;
  slot->dest_valid[stage] = true;
  ++counters_.reads;
  trace_.Add(TraceRecorder::Lane::kPull, info.tensor, begin, absl::Now(),
             info.src_rank, step_, bytes);
  // From here on the lease frees the destination (and releases the stage).
  return ReceivedTensor(dest_pool_region_->data() + *dest, bytes, std::move(shape),
                        std::make_unique<internal::SlotLease>(slot, stage));
}

void Executor::AbandonRead(const std::shared_ptr<PendingRead>& read, int peer,
                           const absl::Status& why) {
  // Giving up is a protocol step: the link's state is unknown from here on,
  // so the executor stops, and the read is cancelled before its destination
  // can go to another tensor.
  engine_.Fail(why);
  const int peers[] = {peer};
  engine_.Fence(peers, [&] { return read->done; },
                absl::Now() + std::min(kFenceWait, options_.timeout),
                absl::StrCat("rank ", rank_plan_.rank(), " gave up a read from it (",
                             why.message(), ")"));
  if (read->done) {
    dest_pool_->Free(read->dest);
    return;
  }
  read->abandoned = true;
  read->keep = new std::shared_ptr<rdma::MemoryRegion>(dest_pool_region_);
  std::fprintf(stderr,
               "rdmaflow: rank %d: a read from rank %d did not end within %s "
               "(fenced: the peer severed on the links); its destination (offset %zu "
               "of the dynamic pool) stays allocated until its completion fires\n",
               rank_plan_.rank(), peer,
               absl::FormatDuration(std::min(kFenceWait, options_.timeout)).c_str(),
               read->dest);
}

// --- Steps and shutdown -----------------------------------------------------

absl::StatusOr<bool> Executor::Ready(int id) {
  RETURN_IF_ERROR(CheckUsable());
  ASSIGN_OR_RETURN(const TransferInfo* info, rank_plan_.FindRecv(id));
  const internal::RecvSlot& slot = *recvs_[recv_by_id_[info->id]];
  RETURN_IF_ERROR(CheckSequence(slot.next_seq, slot.info, "received"));
  RETURN_IF_ERROR(engine_.Poll());
  return slot.arrived > slot.next_seq;
}

absl::Status Executor::FinishStep() {
  RETURN_IF_ERROR(CheckUsable());
  if (!options_.lockstep) {
    ++step_;
    ++counters_.steps;
    return engine_.Poll();
  }
  const uint64_t expected =
      static_cast<uint64_t>(step_ - generation_start_step_) + 1;
  for (const auto& slot : sends_) {
    if (slot->next_seq != expected) {
      return NotMovedError(slot->info, step_, rank_plan_.rank(), "sent");
    }
  }
  for (const auto& slot : recvs_) {
    if (slot->next_seq != expected) {
      return NotMovedError(slot->info, step_, rank_plan_.rank(), "received");
    }
  }
  ++step_;
  ++counters_.steps;
  RETURN_IF_ERROR(engine_.Poll());
  if (options_.trace_steps > 0 && generation_ == 0 &&
      step_ == options_.trace_steps) {
    RETURN_IF_ERROR(Replan());
  }
  return absl::OkStatus();
}

absl::Status Executor::Shutdown() {
  if (shut_down_) return shutdown_status_;
  absl::Status status = engine_.failure();
  if (status.ok()) status = Drain();
  if (status.ok()) status = engine_.Barrier("shutdown");
  if (trace_.enabled()) {
    absl::Status written = trace_.WriteFile(options_.trace_path);
    if (status.ok()) status = written;
  }
  shut_down_ = true;
  shutdown_status_ = status;
  return status;
}

}  // namespace rdmaflow::runtime
