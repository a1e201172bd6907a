// File: send_queues.cc
#include "rdma/ibverbs/send_queues.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <thread>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "common/coarse_clock.h"
#include "common/status_macros.h"
#include "rdma/ibverbs/bootstrap.h"
#include "rdma/ibverbs/ibverbs_status.h"
#include "rdma/ibverbs/queue_pair.h"

namespace rdmaflow::rdma::ibverbs {
namespace {

constexpr size_t kMarkerBytes = 8;
constexpr uint64_t kSeqMask = (uint64_t{1} << kSeqBits) - 1;

}  // namespace

SendQueues::SendQueues(const SendQueueOptions& options, ibv_cq* send_cq,
                       const MemoryRegion& marker)
    : options_(options), send_cq_(send_cq), marker_(marker) {}

std::shared_ptr<EndpointState> SendQueues::NewState(int peer_rank) {
  auto state = std::make_shared<EndpointState>();
  state->id = next_endpoint_id_++;
  state->peer_rank = peer_rank;
  return state;
}

void SendQueues::Add(std::shared_ptr<EndpointState> state) {
  const uint64_t id = state->id;
  endpoints_[id] = std::move(state);
}

void SendQueues::Forget(uint64_t id) { endpoints_.erase(id); }

uint64_t SendQueues::RequestsFor(uint64_t length) const {
  const uint64_t max_message = options_.max_message;
  if (length <= max_message) return 1;  // Nearly always: no division.
  // Without the rounding addition, which could wrap for a huge length.
  return length / max_message + (length % max_message != 0 ? 1 : 0);
}

absl::Status SendQueues::CheckRingRoom(EndpointState& state) {
  absl::StatusOr<bool> room = state.ring->HasRoom();
  if (!room.ok()) {
    // The peer forged its credit: nothing more goes to it.
    state.failure = room.status();
    Stop(state, room.status()).IgnoreError();
    return room.status();
  }
  if (!*room) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "rank ", state.peer_rank, " has not consumed ",
        state.remote.notify_slots,
        " of our notifications yet (its ring is full); progress the "
        "transport and retry"));
  }
  return absl::OkStatus();
}

bool SendQueues::HasRoom(const EndpointState& state, uint64_t requests) const {
  return state.in_flight.size() + state.reserved + requests + 1 <=
         options_.send_depth;
}

absl::StatusOr<std::optional<NotifyRingWriter::Next>>
SendQueues::ReserveNotification(EndpointState& state, uint32_t value) {
  if (!HasRoom(state, 1)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the send queue towards rank ", state.peer_rank,
        " has no room for a notification; progress the transport and retry"));
  }
  std::optional<NotifyRingWriter::Next> record;
  if (state.ring.has_value()) {
    RETURN_IF_ERROR(CheckRingRoom(state));
    record = state.ring->Take(value);
  }
  ++state.reserved;
  return record;
}

void SendQueues::PostReservedNotification(
    EndpointState& state, uint32_t value,
    std::optional<NotifyRingWriter::Next> record, Completion done) {
  if (state.reserved > 0) --state.reserved;
  absl::Status refused = state.closed ? state.stop_reason : state.failure;
  if (state.closed && refused.ok()) {
    refused = absl::CancelledError(
        absl::StrCat("the endpoint to rank ", state.peer_rank, " was closed"));
  }
  if (!refused.ok()) {
    completions_.Push(std::move(done), refused);
    return;
  }
  uint64_t bytes = 0;
  ibv_sge sge{};
  ibv_send_wr wr{};
  if (record.has_value()) {
    bytes = record->record;
    sge.addr = reinterpret_cast<uintptr_t>(&bytes);
    sge.length = kNotifyRecordBytes;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_INLINE;
    wr.wr.rdma.remote_addr = state.remote.notify_address +
                             uint64_t{record->slot} * kNotifyRecordBytes;
    wr.wr.rdma.rkey = state.remote.notify_rkey;
  } else {
    // No data: the immediate alone, aimed at the peer's marker region.
    wr.num_sge = 0;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.imm_data = htonl(value);
    wr.wr.rdma.remote_addr = state.remote.marker_address;
    wr.wr.rdma.rkey = state.remote.marker_rkey;
  }
  // A refused post leaves `done` here (PostChain()).
  absl::Status posted = PostChain(state, &wr, 1, std::move(done), true,
                                  "write with notification", false);
  if (!posted.ok()) {
    if (record.has_value()) FailRing(state, posted);
    completions_.Push(std::move(done), posted);
  }
}

void SendQueues::FailRing(EndpointState& state, const absl::Status& why) {
  if (!state.failure.ok()) return;
  // The target delivers records in sequence: one never written would hold
  // back every later one, so nothing more may be notified on this endpoint.
  state.failure = absl::Status(
      why.code(), absl::StrCat("a notification towards rank ", state.peer_rank,
                               " could not be written (", why.message(),
                               "); the endpoint cannot notify any more"));
  Stop(state, state.failure).IgnoreError();
}

absl::Status SendQueues::PostChain(EndpointState& state, ibv_send_wr* wrs,
                                   int count, Completion&& done,
                                   bool has_callback, const char* op,
                                   bool force_signal) {
  if (state.qp == nullptr) {  // Fenced: the queue pair is destroyed.
    return absl::FailedPreconditionError(absl::StrCat(
        "the queue pair towards rank ", state.peer_rank, " was destroyed"));
  }
  const bool was_idle = state.in_flight.empty();
  int run = state.unsignaled_run;
  for (int i = 0; i < count; ++i) {
    const bool last = i + 1 == count;
    const bool signaled = (last && (force_signal || was_idle)) ||
                          run + 1 >= options_.signal_every;
    if (signaled) wrs[i].send_flags |= IBV_SEND_SIGNALED;
    run = signaled ? 0 : run + 1;
    wrs[i].wr_id = (state.id << kSeqBits) | ((state.next_seq + i) & kSeqMask);
    wrs[i].next = last ? nullptr : &wrs[i + 1];
  }
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(state.qp.get(), wrs, &bad);
  // Without an error every request was taken; with one, those before `bad`.
  int posted = count;
  if (rc != 0) {
    posted = 0;
    while (posted < count && &wrs[posted] != bad) ++posted;
  }
  if (posted == 0) {
    if (rc == ENOMEM) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the send queue towards rank ", state.peer_rank,
                       " is full; progress the transport and retry"));
    }
    return VerbsError(
        rc, absl::StrCat("ibv_post_send (", op, ") to rank ", state.peer_rank));
  }
  for (int i = 0; i < posted; ++i) {
    const bool signaled = (wrs[i].send_flags & IBV_SEND_SIGNALED) != 0;
    state.unsignaled_run = signaled ? 0 : state.unsignaled_run + 1;
    state.tail_unsignaled = !signaled;
    sweep_due_ |= !signaled;
    // Built in place: nothing of it moves on the way in.
    WorkRequest& request = state.in_flight.emplace_back();
    request.seq = state.next_seq++;
    request.op = op;
    // The operation's callback rides on the last request taken: on a
    // partial chain it completes with the failure below.
    if (i + 1 == posted) {
      request.done = std::move(done);
      request.has_callback = has_callback;
      if (has_callback) ++state.operations;
    }
  }
  state.posted_since_progress = true;
  if (posted < count) {
    // The adapter may be reading the source already, so the operation
    // cannot be refused: it is accepted and fails (whatever the adapter says
    // of the requests it took) once they complete or flush.
    absl::Status error =
        VerbsError(rc, absl::StrCat("ibv_post_send (", op, ") to rank ",
                                    state.peer_rank, " took ", posted,
                                    " of its ", count, " work requests"));
    state.in_flight.back().forced = error;
    if (state.failure.ok()) state.failure = error;
    Stop(state, error).IgnoreError();
  }
  return absl::OkStatus();
}

absl::Status SendQueues::PostOperation(EndpointState& state,
                                       ibv_wr_opcode opcode,
                                       std::optional<uint32_t> notification,
                                       const ibv_sge& sge, uint64_t length,
                                       uint64_t remote_address, uint32_t rkey,
                                       Completion&& done, const char* op,
                                       bool host_source) {
  const uint64_t max_message = options_.max_message;
  const uint64_t chunks = RequestsFor(length);
  const bool flag = notification.has_value() && state.ring.has_value();
  const uint64_t requests = chunks + (flag ? 1 : 0);
  // Room for the requests and a marker behind them.
  if (!HasRoom(state, requests)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the send queue towards rank ", state.peer_rank, " has no room for ",
        requests, " work requests; progress the transport and retry"));
  }
  if (flag) RETURN_IF_ERROR(CheckRingRoom(state));
  absl::InlinedVector<ibv_sge, 2> sges(chunks);
  absl::InlinedVector<ibv_send_wr, 3> wrs(requests);
  for (uint64_t i = 0; i < chunks; ++i) {
    const uint64_t offset = i * max_message;
    ibv_sge& chunk = sges[i];
    chunk = sge;
    chunk.addr += offset;
    chunk.length =
        static_cast<uint32_t>(std::min(max_message, length - offset));
    ibv_send_wr& wr = wrs[i];
    wr = {};
    wr.sg_list = &chunk;
    wr.num_sge = 1;
    wr.opcode = opcode;
    if (i + 1 == chunks && notification && !flag) {
      wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      wr.imm_data = htonl(*notification);
    }
    wr.wr.rdma.remote_addr = remote_address + offset;
    wr.wr.rdma.rkey = rkey;
    // Inline data is copied at post time: the source is free at once.
    if (opcode == IBV_WR_RDMA_WRITE && host_source &&
        chunk.length <= state.max_inline) {
      wr.send_flags |= IBV_SEND_INLINE;
    }
  }
  // The flag record: inline, so its source (this stack) is free at once.
  uint64_t record = 0;
  ibv_sge record_sge{};
  if (flag) {
    const NotifyRingWriter::Next next = state.ring->Take(*notification);
    record = next.record;
    record_sge.addr = reinterpret_cast<uintptr_t>(&record);
    record_sge.length = kNotifyRecordBytes;
    ibv_send_wr& wr = wrs[chunks];
    wr = {};
    wr.sg_list = &record_sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_INLINE;
    wr.wr.rdma.remote_addr =
        state.remote.notify_address + uint64_t{next.slot} * kNotifyRecordBytes;
    wr.wr.rdma.rkey = state.remote.notify_rkey;
  }
  absl::Status posted = PostChain(state, wrs.data(), static_cast<int>(requests),
                                  std::move(done), true, op, false);
  // Nothing was taken: the record's number goes to the next one.
  if (!posted.ok() && flag) state.ring->Untake();
  return posted;
}

absl::Status SendQueues::PostMarker(EndpointState& state, Completion&& done,
                                    bool has_callback) {
  ibv_sge sge{};
  // The scratch half of our marker region receives the bytes.
  sge.addr = reinterpret_cast<uintptr_t>(marker_.data()) + 64;
  sge.length = kMarkerBytes;
  sge.lkey = static_cast<VerbsRegistration*>(marker_.registration())->lkey();
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_READ;
  wr.wr.rdma.remote_addr = state.remote.marker_address;
  wr.wr.rdma.rkey = state.remote.marker_rkey;
  return PostChain(state, &wr, 1, std::move(done), has_callback,
                   has_callback ? "flush" : "completion marker", true);
}

void SendQueues::Complete(EndpointState& state, WorkRequest& request,
                          absl::Status status) {
  if (!request.has_callback) return;
  --state.operations;
  if (!request.forced.ok()) status = request.forced;
  completions_.Push(std::move(request.done), std::move(status));
}

void SendQueues::FailAll(EndpointState& state, const absl::Status& status) {
  while (!state.in_flight.empty()) {
    Complete(state, state.in_flight.front(), status);
    state.in_flight.pop_front();
  }
  state.tail_unsignaled = false;
}

void SendQueues::HandleCompletion(const ibv_wc& wc) {
  auto it = endpoints_.find(wc.wr_id >> kSeqBits);
  if (it == endpoints_.end()) return;  // Its endpoint is gone.
  EndpointState& state = *it->second;
  const uint64_t seq = wc.wr_id & kSeqMask;
  // Everything posted before `seq` completed successfully: a send queue
  // completes in order, and a failed or flushed request always produces a
  // completion, signaled or not.
  while (!state.in_flight.empty() && state.in_flight.front().seq < seq) {
    Complete(state, state.in_flight.front(), absl::OkStatus());
    state.in_flight.pop_front();
  }
  if (state.in_flight.empty() || state.in_flight.front().seq != seq) return;
  // Completed where it lies (Complete() only queues the callback), then
  // dropped.
  WorkRequest& request = state.in_flight.front();
  if (wc.status == IBV_WC_SUCCESS) {
    Complete(state, request, absl::OkStatus());
    state.in_flight.pop_front();
    if (state.in_flight.empty()) state.tail_unsignaled = false;
    return;
  }
  // Flushed after a stop; or anything unfinished on a closed endpoint, which
  // is cancelled whatever the adapter says about it.
  if (state.stopped && (wc.status == IBV_WC_WR_FLUSH_ERR || state.closed)) {
    Complete(state, request, state.stop_reason);
    state.in_flight.pop_front();
    return;
  }
  absl::Status error =
      WorkCompletionError(wc.status, state.peer_rank, request.op);
  if (state.failure.ok()) state.failure = error;
  Complete(state, request, error);
  state.in_flight.pop_front();
  if (!state.stopped) {
    // The adapter moved the queue pair to the error state: every request
    // still queued ends with a flush completion, which completes it with
    // this failure once the adapter is done with its buffers.
    state.stopped = true;
    state.stop_reason = state.failure;
    state.drain_deadline = absl::Now() + options_.close_timeout;
    state.tail_unsignaled = false;
  }
}

absl::StatusOr<int> SendQueues::Poll() {
  ibv_wc wc[kPollBatch];
  const int n = ibv_poll_cq(send_cq_, kPollBatch, wc);
  if (n < 0) return absl::InternalError("ibv_poll_cq (send) failed");
  for (int i = 0; i < n; ++i) HandleCompletion(wc[i]);
  return n;
}

void SendQueues::SweepIdleTails() {
  // Endpoints left idle (nothing posted since the last Progress()) with an
  // unsignaled tail get a signaled marker behind it; those still posting
  // are looked at again next time. An endpoint whose flag is stale here
  // (posted since, but with a signaled tail) only needs it cleared.
  if (!sweep_due_) return;  // no post left a tail unsignaled
  sweep_due_ = false;
  for (auto& [id, state] : endpoints_) {
    if (state->tail_unsignaled && !state->posted_since_progress &&
        !state->stopped) {
      PostMarker(*state, nullptr, false).IgnoreError();
    }
    state->posted_since_progress = false;
    // A marker refused (a full queue) leaves the tail unsignaled: retried.
    if (state->tail_unsignaled && !state->stopped) sweep_due_ = true;
  }
}

void SendQueues::WatchPeers() {
  // A poll() per endpoint is cheap, but not on every Progress() call; nor
  // is a precise clock read everywhere (CoarseNow()).
  const absl::Time now = CoarseNow();
  if (now < next_watch_) return;
  next_watch_ = now + absl::Milliseconds(50);
  for (auto& [id, state] : endpoints_) {
    if (state->stopped) {
      if (!state->in_flight.empty() && now >= state->drain_deadline) {
        Fence(*state).IgnoreError();  // Logged.
      }
      continue;
    }
    if (state->cm != nullptr ? !state->cm->Disconnected()
                             : !PeerClosed(state->connection.get())) {
      continue;
    }
    state->failure = absl::UnavailableError(absl::StrCat(
        "rank ", state->peer_rank,
        " is gone: its connection closed (the process exited or was killed)"));
    // What is in flight fails with it as the flush completions arrive.
    Stop(*state, state->failure).IgnoreError();
  }
}

absl::Status SendQueues::Stop(EndpointState& state, absl::Status reason) {
  if (state.stopped) return absl::OkStatus();
  // A request that completed unsignaled leaves no completion, so the last
  // request must be signaled for its completion to prove the adapter done.
  // Post() always keeps room for this marker.
  absl::Status marker = absl::OkStatus();
  if (state.tail_unsignaled && !state.in_flight.empty()) {
    marker = PostMarker(state, nullptr, false);
  }
  absl::Status stopped = StopQueuePair(state.qp.get());
  state.stopped = true;
  state.stop_reason = std::move(reason);
  state.drain_deadline = absl::Now() + options_.close_timeout;
  state.tail_unsignaled = false;
  // Without the marker or the error state the flush may not come: Fence()
  // at the deadline covers it.
  if (!marker.ok()) return marker;
  return stopped;
}

absl::Status SendQueues::CloseEndpoint(EndpointState& state) {
  absl::Status stopped = Stop(
      state, absl::CancelledError(absl::StrCat(
                 "the endpoint to rank ", state.peer_rank, " was closed")));
  // The flush takes microseconds on a NIC and longer on an emulated one:
  // spin, then yield, then sleep briefly between polls.
  int idle = 0;
  while (!state.in_flight.empty()) {
    absl::StatusOr<int> polled = Poll();
    if (!polled.ok()) {
      absl::Status fenced = Fence(state);
      return fenced.ok() ? polled.status() : fenced;
    }
    if (*polled > 0) {
      idle = 0;
      continue;
    }
    if (absl::Now() >= state.drain_deadline) {
      absl::Status fenced = Fence(state);
      return fenced.ok() ? stopped : fenced;
    }
    ++idle;
    if (idle > 256) {
      absl::SleepFor(absl::Microseconds(200));
    } else if (idle > 32) {
      std::this_thread::yield();
    }
  }
  return stopped;
}

absl::Status SendQueues::Fence(EndpointState& state) {
  ++fenced_count_;
  const size_t left = state.in_flight.size();
  ibv_qp* qp = state.qp.release();
  const int rc = qp == nullptr ? 0 : ibv_destroy_qp(qp);
  if (rc == 0) {
    std::fprintf(stderr,
                 "rdmaflow ibverbs: %zu work requests towards rank %d had no "
                 "completion %s after their queue pair was stopped; destroyed "
                 "the queue pair, so the adapter no longer touches their "
                 "buffers\n",
                 left, state.peer_rank,
                 absl::FormatDuration(options_.close_timeout).c_str());
    FailAll(state, state.stop_reason);
    return absl::OkStatus();
  }
  // The adapter may still write into these buffers: never run the callbacks
  // (they hand the buffers back) nor destroy what they captured. Leaked on
  // purpose.
  auto* leaked = new std::deque<WorkRequest>(std::move(state.in_flight));
  state.in_flight.clear();
  state.operations = 0;
  const std::string message = absl::StrCat(
      "cannot destroy the queue pair towards rank ", state.peer_rank, " (",
      std::strerror(rc), ") after it did not flush: leaking it and the ",
      leaked->size(),
      " operations still in flight, whose buffers the adapter may still "
      "write; do not free or reuse them");
  std::fprintf(stderr, "rdmaflow ibverbs: %s\n", message.c_str());
  return absl::InternalError(message);
}

}  // namespace rdmaflow::rdma::ibverbs
