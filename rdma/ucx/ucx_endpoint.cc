#include "rdma/ucx/ucx_endpoint.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/shared_word.h"
#include "common/status_macros.h"
#include "rdma/slice.h"
#include "rdma/ucx/envelope.h"
#include "rdma/ucx/peer_liveness.h"
#include "rdma/ucx/process_maps.h"
#include "rdma/ucx/ucx_bound_read.h"
#include "rdma/ucx/ucx_bound_write.h"
#include "rdma/ucx/ucx_status.h"
#include "rdma/ucx/ucx_transport.h"

namespace rdmaflow::rdma::ucx {
namespace {

// a == b for the short packed keys of the look-up cache, without a call:
// in words, the last one overlapping (memcmp is a third of a post's time).
bool SameKey(const std::string& a, const std::string& b) {
  const size_t n = a.size();
  if (n != b.size()) return false;
  if (n < sizeof(uint64_t)) return std::memcmp(a.data(), b.data(), n) == 0;
  uint64_t differ = 0;
  for (size_t i = 0; i + sizeof(uint64_t) <= n; i += sizeof(uint64_t)) {
    uint64_t x;
    uint64_t y;
    std::memcpy(&x, a.data() + i, sizeof(x));
    std::memcpy(&y, b.data() + i, sizeof(y));
    differ |= x ^ y;
  }
  uint64_t x;
  uint64_t y;
  std::memcpy(&x, a.data() + n - sizeof(x), sizeof(x));
  std::memcpy(&y, b.data() + n - sizeof(y), sizeof(y));
  return (differ | (x ^ y)) == 0;
}

constexpr char kBackend[] = "ucx";
// A forced close only purges local state, so it finishes in microseconds; the
// bound exists so a misbehaving UCX cannot hang Close().
constexpr absl::Duration kCloseTimeout = absl::Seconds(10);

void OnSendDone(void* request, ucs_status_t status, void* user_data) {
  ucp_request_free(request);
  auto* op = static_cast<UcxOp*>(user_data);
  if (op->abandoned) {
    delete op;
    return;
  }
  op->endpoint->in_flight.erase(op);
  UcxOps::OnRequestStatus(op, status);
}

ucp_request_param_t CallbackParam(UcxOp* op) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = &OnSendDone;
  param.user_data = op;
  return param;
}

// Passes the local region's memory handle, when it was mapped by this
// transport's UCX context, so UCX does not register the buffer again on every
// operation. Other memory still works; UCX registers it on the fly.
void AddLocalMemh(const LocalSlice& local, const UcxEndpointState& state,
                  ucp_request_param_t& param) {
  if (local.region->descriptor().backend != kBackend) return;
  auto* registration =
      static_cast<UcxRegistration*>(local.region->registration());
  if (registration == nullptr ||
      registration->context->context != state.worker->context) {
    return;
  }
  param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
  param.memh = registration->memh;
}

// Handles the return value of a ucp_*_nbx call made with CallbackParam(op):
// NULL is an immediate success, an error pointer an immediate failure, and a
// request will call back.
void HandleRequest(UcxOp* op, ucs_status_ptr_t request) {
  if (request == nullptr) {
    UcxOps::OnRequestStatus(op, UCS_OK);
  } else if (UCS_PTR_IS_ERR(request)) {
    UcxOps::OnRequestStatus(op, UCS_PTR_STATUS(request));
  } else {
    op->endpoint->in_flight.insert(op);
  }
}

void IssueFlush(UcxOp* op) {
  UcxEndpointState& state = *op->endpoint;
  if (state.ep == nullptr) {
    UcxOps::Complete(op, UcxOps::Translate(*op, UCS_ERR_CANCELED));
    return;
  }
  ucp_request_param_t param = CallbackParam(op);
  HandleRequest(op, ucp_ep_flush_nbx(state.ep, &param));
}

}  // namespace

absl::Status UcxOps::Translate(const UcxOp& op, ucs_status_t status) {
  if (status == UCS_OK) return absl::OkStatus();
  const UcxEndpointState& state = *op.endpoint;
  if (!state.failure.ok()) return state.failure;
  if (state.closed || status == UCS_ERR_CANCELED) {
    return absl::CancelledError(absl::StrCat(
        op.what, " with rank ", state.peer_rank,
        " was cancelled: the endpoint was closed"));
  }
  return UcsToStatus(status,
                     absl::StrCat(op.what, " with rank ", state.peer_rank));
}

void UcxOps::Complete(UcxOp* op, absl::Status status, bool abandon) {
  std::shared_ptr<UcxEndpointState> state = std::move(op->endpoint);
  Completion done = std::move(op->done);
  if (abandon) {
    op->abandoned = true;
  } else {
    delete op;
  }
  Queue(std::move(state), std::move(done), std::move(status));
}

void UcxOps::Queue(std::shared_ptr<UcxEndpointState> state, Completion done,
                   absl::Status status) {
  UcxWorkerState* worker = state->worker;
  size_t* outstanding = &state->outstanding;
  worker->completions.Push(std::move(done), std::move(status), std::move(state),
                           outstanding);
}

void UcxOps::OnRequestStatus(UcxOp* op, ucs_status_t status) {
  if (op->kind == UcxOp::Kind::kNotify && op->stage == UcxOp::Stage::kFlushing) {
    op->stage = UcxOp::Stage::kReady;
    op->flush_status = Translate(*op, status);
    op->endpoint->worker->to_pump.push_back(op->endpoint);
    return;
  }
  Complete(op, Translate(*op, status));
}

void UcxOps::PumpSequence(UcxEndpointState& state) {
  while (!state.sequence.empty()) {
    UcxOp* op = state.sequence.front();
    if (op->kind == UcxOp::Kind::kFlush) {
      state.sequence.pop_front();
      IssueFlush(op);
      continue;
    }
    if (op->stage == UcxOp::Stage::kFlushing) return;  // Not due yet.
    state.sequence.pop_front();
    if (!op->flush_status.ok() || state.ep == nullptr) {
      absl::Status status = op->flush_status;
      if (status.ok()) status = Translate(*op, UCS_ERR_CANCELED);
      if (op->flag && !state.closed && state.failure.ok()) {
        // Its slot was taken and will never be filled: the peer reads its
        // lane in order, so no later notification could reach it.
        state.failure = absl::DataLossError(absl::StrCat(
            "a notification to rank ", state.peer_rank, " was lost (",
            status.message(), "); its flag lane cannot go on"));
      }
      Complete(op, std::move(status));
      continue;
    }
    if (op->word) {
      // The data is placed: now the flag.
      if (op->word_mapped != nullptr) {
        uint64_t flag = 0;
        std::memcpy(&flag, op->payload, sizeof(flag));
        StoreSharedWord(op->word_mapped, flag);
        Complete(op, absl::OkStatus());
        continue;
      }
      op->stage = UcxOp::Stage::kSending;
      ucp_request_param_t param = CallbackParam(op);
      HandleRequest(op, ucp_put_nbx(state.ep, op->payload, sizeof(op->payload),
                                    op->word_address, op->word_rkey, &param));
      continue;
    }
    if (op->flag) {
      if (!state.lane.has_value()) {
        Complete(op, Translate(*op, UCS_ERR_CANCELED));
        continue;
      }
      // The data is placed (the flush said so): now its record.
      uint64_t record = 0;
      std::memcpy(&record, op->payload, sizeof(record));
      StoreSharedWord(state.lane->inbox() + state.lane->RecordOffset(op->slot), record);
      Complete(op, absl::OkStatus());
      continue;
    }
    op->stage = UcxOp::Stage::kSending;
    ucp_request_param_t param = CallbackParam(op);
    HandleRequest(op, ucp_am_send_nbx(state.ep, kNotificationAmId, nullptr, 0,
                                      op->payload, sizeof(op->payload),
                                      &param));
  }
}

UcxEndpoint::~UcxEndpoint() {
  absl::Status status = Close();
  if (!status.ok()) {
    std::fprintf(stderr, "rdmaflow: closing UCX endpoint: %s\n",
                 status.ToString().c_str());
  }
  // Completions queued by UcxOps::CompleteNow() point into the state: it
  // stays until they fired (UcxTransport::Progress drops it then).
  if (state_->outstanding > 0) state_->worker->retired.push_back(state_);
}

absl::Status UcxOps::ClosedError(const UcxEndpointState& state) {
  return absl::FailedPreconditionError(
      absl::StrCat("endpoint to rank ", state.peer_rank, " is closed"));
}

absl::Status UcxEndpoint::CheckOpen() const {
  if (state_->closed) return UcxOps::ClosedError(*state_);
  return state_->failure;
}

absl::Status UcxEndpoint::CheckPostable() const {
  if (UcxOps::CanPost(*state_)) return absl::OkStatus();
  RETURN_IF_ERROR(CheckOpen());
  return absl::ResourceExhaustedError(absl::StrCat(
      "endpoint to rank ", state_->peer_rank, " has ", state_->outstanding,
      " operations in flight (the limit); call Progress() and retry"));
}

absl::StatusOr<ucp_rkey_h> UcxEndpoint::RemoteKey(const RemoteRegion& region) {
  if (state_->last_rkey != nullptr && state_->last_address == region.address &&
      state_->last_length == region.length && SameKey(state_->last_key, region.packed_key)) {
    return state_->last_rkey;
  }
  auto it = state_->rkeys.find(region.packed_key);
  ucp_rkey_h rkey = nullptr;
  if (it != state_->rkeys.end()) {
    rkey = it->second;
  } else {
    ASSIGN_OR_RETURN(rkey, UnpackKey(region));
    state_->rkeys.emplace(region.packed_key, rkey);
  }
  UcxEndpointState::Mapping mapping;
  if (state_->copies) {
    UcxEndpointState::Extent extent{region.packed_key, region.address, region.length};
    auto found = state_->mappings.find(extent);
    if (found == state_->mappings.end()) {
      ASSIGN_OR_RETURN(mapping, MapRegion(rkey, region));
      state_->mappings.emplace(std::move(extent), mapping);
    } else {
      mapping = found->second;
    }
  }
  state_->last_key = region.packed_key;
  state_->last_address = region.address;
  state_->last_length = region.length;
  state_->last_rkey = rkey;
  state_->last_mapping = mapping;
  return rkey;
}

absl::StatusOr<UcxEndpointState::Mapping> UcxEndpoint::MapRegion(
    ucp_rkey_h rkey, const RemoteRegion& region) {
  UcxEndpointState::Mapping mapping;
  void* mapped = nullptr;
  // A key UCX does not map (not shared memory) goes through UCX's posts.
  if (ucp_rkey_ptr(rkey, region.address, &mapped) != UCS_OK) return mapping;
  // ucp_rkey_ptr adds an offset to the address the peer announced: the
  // whole extent it announced must lie inside one shared mapping of ours.
  // Where it does not, UCX's own shared-memory put would copy to the same
  // place unchecked: the region is refused rather than posted.
  if (!InsideOwnSharedMapping(mapped, region.length)) {
    return absl::InvalidArgumentError(absl::StrCat(
        region.DebugString(), " of rank ", state_->peer_rank,
        " does not lie inside the shared memory this process mapped for it: a "
        "forged or corrupted descriptor (or a region of another run)"));
  }
  mapping.mapped = true;
  mapping.delta = reinterpret_cast<uintptr_t>(mapped) - region.address;
  return mapping;
}

std::byte* UcxEndpoint::MappedAt(const RemoteSlice& remote) const {
  if (!state_->last_mapping.mapped) return nullptr;
  return reinterpret_cast<std::byte*>(remote.address() + state_->last_mapping.delta);
}

void UcxEndpoint::ClaimLane() {
  std::optional<FlagLane> lane = FlagLane::Claim(
      state_->inbox, state_->inbox_layout, state_->worker->rank, state_->peer_rank);
  if (!lane.has_value()) {
    state_->notify = absl::StrCat("notify am (all ", state_->inbox_layout.lanes,
                                  " lanes of its inbox are taken)");
    // No lane will come free: active messages from now on.
    state_->inbox = nullptr;
    return;
  }
  state_->notify = absl::StrCat("notify flag (lane ", lane->index(), " of ",
                                state_->inbox_layout.lanes, ", ", lane->slots(),
                                " slots)");
  state_->lane = std::move(lane);
}

absl::Status UcxEndpoint::LaneRoom() {
  absl::StatusOr<bool> room = state_->lane->writer().HasRoom();
  if (!room.ok()) {
    // The peer's consumed count is forged or corrupt: nothing more to it.
    state_->failure = room.status();
    return room.status();
  }
  if (*room) return absl::OkStatus();
  // A full lane is what a dead peer looks like too.
  if (UcxOps::NoticeExitedPeer(*state_)) return state_->failure;
  return absl::ResourceExhaustedError(absl::StrCat(
      "rank ", state_->peer_rank, " has not taken the last ",
      state_->lane->slots(),
      " notifications of ours (its flag lane is full); call Progress() and "
      "retry"));
}

absl::Status UcxEndpoint::Prepare(const RemoteRegion& region) {
  RETURN_IF_ERROR(CheckOpen());
  if (state_->ep == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "endpoint to rank ", state_->peer_rank, " was given up"));
  }
  return RemoteKey(region).status();
}

absl::StatusOr<ucp_rkey_h> UcxEndpoint::UnpackKey(const RemoteRegion& region) {
  absl::StatusOr<std::string> buffer = UnwrapRkey(region.packed_key);
  if (!buffer.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(buffer.status().message(), " in ", region.DebugString()));
  }
  // UCX 1.13 faults, rather than failing, when it cannot attach a key's
  // shared-memory segment (its error path releases keys it never unpacked;
  // fixed in UCX 1.19), and a dead peer's segment cannot be attached. So a
  // watched peer is checked first. What remains is a peer that dies within
  // the microseconds between this check and UCX's attach (docs/rdma.md).
  if (UcxOps::NoticeExitedPeer(*state_)) return state_->failure;
  ucp_rkey_h rkey = nullptr;
  ucs_status_t status = ucp_ep_rkey_unpack(state_->ep, buffer->data(), &rkey);
  if (status != UCS_OK) {
    return absl::InvalidArgumentError(
        absl::StrCat("UCX cannot unpack the remote key of ",
                     region.DebugString(), ": ", ucs_status_string(status)));
  }
  return rkey;
}

absl::Status UcxEndpoint::PostData(bool is_write, const LocalSlice& local,
                                   const RemoteSlice& remote, ucp_rkey_h rkey,
                                   Completion done) {
  if (std::byte* mapped = MappedAt(remote)) {
    // A same-host peer's shared memory, mapped here: the copy is the
    // transfer (what UCX's shared-memory put and get do, without their
    // requests). The completion is queued after it (queuing takes no
    // locked instruction: UcxOps::CompleteNow).
    if (is_write) {
      UcxOps::CopyIntoMapped(*state_, mapped, local.data(), local.length);
    } else {
      UcxOps::CopyMapped(local.data(), mapped, local.length);
    }
    UcxOps::CompleteNow(*state_, std::move(done));
    return absl::OkStatus();
  }
  if (is_write) state_->wrote_through_ucx = true;
  auto* op = new UcxOp{UcxOp::Kind::kData, is_write ? "write" : "read",
                       state_, std::move(done)};
  ucp_request_param_t param = CallbackParam(op);
  AddLocalMemh(local, *state_, param);
  ucs_status_ptr_t request =
      is_write ? ucp_put_nbx(state_->ep, local.data(), local.length,
                             remote.address(), rkey, &param)
               : ucp_get_nbx(state_->ep, local.data(), local.length,
                             remote.address(), rkey, &param);
  if (UCS_PTR_IS_ERR(request)) {
    // Not accepted: the caller keeps `done`.
    absl::Status status = UcxOps::Translate(*op, UCS_PTR_STATUS(request));
    delete op;
    return status;
  }
  ++state_->outstanding;
  HandleRequest(op, request);
  return absl::OkStatus();
}

absl::Status UcxEndpoint::PostWrite(const LocalSlice& src,
                                    const RemoteSlice& dst,
                                    std::optional<uint32_t> notification,
                                    Completion done) {
  RETURN_IF_ERROR(CheckTransfer(src, dst, state_->peer_rank, kBackend));
  RETURN_IF_ERROR(CheckPostable());
  ASSIGN_OR_RETURN(ucp_rkey_h rkey, RemoteKey(*dst.region));
  if (!notification.has_value()) {
    return PostData(/*is_write=*/true, src, dst, rkey, std::move(done));
  }
  if (state_->inbox != nullptr && !state_->lane.has_value()) ClaimLane();
  if (state_->lane.has_value()) {
    std::byte* mapped = MappedAt(dst);
    if (mapped == nullptr || state_->wrote_through_ucx) {
      return PostFlagged(src, dst, rkey, *notification, std::move(done));
    }
    // The copy, then the record: a release store, so the peer that sees
    // the record sees the bytes of this write and of every earlier one;
    // the completion is queued after it, off the peer's wait.
    RETURN_IF_ERROR(LaneRoom());
    CopyToPeer(mapped, src.data(), src.length, state_->worker->streaming_copy_min);
    FlagLane& lane = *state_->lane;
    const NotifyRingWriter::Next next = lane.writer().Take(*notification);
    StoreSharedWord(lane.inbox() + lane.RecordOffset(next.slot), next.record);
    UcxOps::CompleteNow(*state_, std::move(done));
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(PutBehindNotification(src, dst, rkey));
  auto* op = new UcxOp{UcxOp::Kind::kNotify, "notified write", state_,
                       std::move(done)};
  op->payload[0] = static_cast<uint32_t>(state_->worker->rank);
  op->payload[1] = *notification;
  NotifyAfterFlush(op);
  return absl::OkStatus();
}

absl::Status UcxEndpoint::PostWriteWithFlag(const LocalSlice& src,
                                            const RemoteSlice& dst,
                                            const RemoteSlice& flag_word,
                                            uint64_t flag, Completion done) {
  RETURN_IF_ERROR(CheckTransfer(src, dst, state_->peer_rank, kBackend));
  RETURN_IF_ERROR(CheckFlagWord(flag_word, dst, state_->peer_rank, kBackend));
  RETURN_IF_ERROR(CheckPostable());
  ASSIGN_OR_RETURN(const FlagTargets to, ResolveFlagTargets(dst, flag_word));
  if (to.mapped != nullptr && to.flag_mapped != nullptr && !state_->wrote_through_ucx) {
    // As a mapped notified write, with the flag where the record goes.
    UcxOps::CopyAndFlag(*state_, to.mapped, src.data(), src.length, to.flag_mapped, flag,
                        std::move(done));
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(PutBehindNotification(src, dst, to.rkey));
  auto* op = new UcxOp{UcxOp::Kind::kNotify, "flagged write", state_,
                       std::move(done)};
  op->word = true;
  static_assert(sizeof(op->payload) == sizeof(flag));
  std::memcpy(op->payload, &flag, sizeof(flag));
  op->word_mapped = to.flag_mapped;
  op->word_address = flag_word.address();
  op->word_rkey = to.flag_rkey;
  NotifyAfterFlush(op);
  return absl::OkStatus();
}

absl::StatusOr<UcxEndpoint::FlagTargets> UcxEndpoint::ResolveFlagTargets(
    const RemoteSlice& dst, const RemoteSlice& flag_word) {
  // The flag's key first: MappedAt() answers for the last key looked up.
  // A flag in the data's region (the usual place: right behind it) needs
  // no second look-up.
  FlagTargets to;
  const bool one_region = flag_word.region == dst.region;
  if (!one_region) {
    ASSIGN_OR_RETURN(to.flag_rkey, RemoteKey(*flag_word.region));
    to.flag_mapped = MappedAt(flag_word);
  }
  ASSIGN_OR_RETURN(to.rkey, RemoteKey(*dst.region));
  to.mapped = MappedAt(dst);
  if (one_region) {
    to.flag_rkey = to.rkey;
    to.flag_mapped = MappedAt(flag_word);
  }
  // One aligned store places the flag whole; a mapping that would misalign
  // it (never one UCX makes) is not used for it.
  if (reinterpret_cast<uintptr_t>(to.flag_mapped) % sizeof(uint64_t) != 0) {
    to.flag_mapped = nullptr;
  }
  return to;
}

absl::StatusOr<std::unique_ptr<BoundFlaggedWrite>> UcxEndpoint::BindFlaggedWrite(
    const LocalSlice& src, const RemoteSlice& dst, const RemoteSlice& flag_word) {
  RETURN_IF_ERROR(CheckTransfer(src, dst, state_->peer_rank, kBackend));
  RETURN_IF_ERROR(CheckFlagWord(flag_word, dst, state_->peer_rank, kBackend));
  // A binding is no operation in flight: only a closed or failed endpoint
  // refuses one.
  RETURN_IF_ERROR(CheckOpen());
  ASSIGN_OR_RETURN(const FlagTargets to, ResolveFlagTargets(dst, flag_word));
  const bool mapped = to.mapped != nullptr && to.flag_mapped != nullptr;
  return std::make_unique<UcxBoundFlaggedWrite>(*this, state_, src, dst, flag_word,
                                                mapped ? to.mapped : nullptr,
                                                mapped ? to.flag_mapped : nullptr);
}

absl::StatusOr<std::unique_ptr<BoundRead>> UcxEndpoint::BindRead(const LocalSlice& dst,
                                                                 const RemoteSlice& src) {
  RETURN_IF_ERROR(CheckTransfer(dst, src, state_->peer_rank, kBackend));
  RETURN_IF_ERROR(CheckOpen());
  RETURN_IF_ERROR(RemoteKey(*src.region).status());
  return std::make_unique<UcxBoundRead>(*this, state_, dst, src, MappedAt(src));
}

absl::Status UcxEndpoint::PutBehindNotification(const LocalSlice& src,
                                                const RemoteSlice& dst,
                                                ucp_rkey_h rkey) {
  // The put itself needs no callback: the flush that follows reports both.
  // Later copies through the mapping must not pass it (a flagged write's
  // flag covers every earlier write): they go behind a flush from now on.
  state_->wrote_through_ucx = true;
  ucp_request_param_t put_param{};
  AddLocalMemh(src, *state_, put_param);
  ucs_status_ptr_t put = ucp_put_nbx(state_->ep, src.data(), src.length,
                                     dst.address(), rkey, &put_param);
  if (UCS_PTR_IS_ERR(put)) {
    return UcsToStatus(UCS_PTR_STATUS(put),
                       absl::StrCat("write to rank ", state_->peer_rank));
  }
  if (put != nullptr) ucp_request_free(put);
  return absl::OkStatus();
}

void UcxEndpoint::NotifyAfterFlush(UcxOp* op) {
  ++state_->outstanding;
  state_->sequence.push_back(op);
  ucp_request_param_t param = CallbackParam(op);
  HandleRequest(op, ucp_ep_flush_nbx(state_->ep, &param));
  // A flush that finished at once lets the notification go out now.
  UcxOps::PumpSequence(*state_);
}

absl::Status UcxEndpoint::PostFlagged(const LocalSlice& src,
                                      const RemoteSlice& dst, ucp_rkey_h rkey,
                                      uint32_t notification, Completion done) {
  RETURN_IF_ERROR(LaneRoom());
  state_->wrote_through_ucx = true;
  // Behind a flush: a UCX fence would not do, as UCX 1.13 orders only
  // operations of one transport with it, and the data may go by CMA or by
  // active messages.
  RETURN_IF_ERROR(PutBehindNotification(src, dst, rkey));
  // The record's slot is taken now, so the notifications keep their post
  // order whichever way each one goes; the record is stored once the
  // flush is done (UcxOps::PumpSequence).
  const NotifyRingWriter::Next next = state_->lane->writer().Take(notification);
  auto* op = new UcxOp{UcxOp::Kind::kNotify, "notified write", state_,
                       std::move(done)};
  op->flag = true;
  op->slot = next.slot;
  static_assert(sizeof(op->payload) == sizeof(next.record));
  std::memcpy(op->payload, &next.record, sizeof(next.record));
  NotifyAfterFlush(op);
  return absl::OkStatus();
}

void UcxEndpoint::UseFlagInbox(const FlagInboxAddress& inbox) {
  const int peer = state_->peer_rank;
  auto am = [&](absl::string_view why) {
    state_->notify = absl::StrCat("notify am (", why, ")");
  };
  absl::StatusOr<FlagInboxLayout> layout =
      FlagInboxLayout::Validate(inbox.lanes, inbox.slots, inbox.bytes, peer);
  if (!layout.ok()) return am(layout.status().message());
  if (inbox.address % 64 != 0) {
    return am(absl::StrCat("rank ", peer, " announced its inbox at 0x",
                           absl::Hex(inbox.address), ", not 64-byte aligned"));
  }
  // As UnpackKey: UCX 1.13 faults on a dead peer's segment.
  if (UcxOps::NoticeExitedPeer(*state_)) return am("the peer has exited");
  ucp_rkey_h rkey = nullptr;
  ucs_status_t status = ucp_ep_rkey_unpack(state_->ep, inbox.rkey.data(), &rkey);
  if (status != UCS_OK) {
    return am(absl::StrCat("its inbox key does not unpack: ",
                           ucs_status_string(status)));
  }
  void* mapped = nullptr;
  status = ucp_rkey_ptr(rkey, inbox.address, &mapped);
  if (status != UCS_OK || reinterpret_cast<uintptr_t>(mapped) % 64 != 0 ||
      !InsideOwnSharedMapping(mapped, layout->TotalBytes())) {
    ucp_rkey_destroy(rkey);
    return am(absl::StrCat("its inbox does not map here: ",
                           status == UCS_OK ? "misaligned or past the segment"
                                            : ucs_status_string(status)));
  }
  state_->inbox = static_cast<std::byte*>(mapped);
  state_->inbox_rkey = rkey;
  state_->inbox_layout = *layout;
  state_->notify = absl::StrCat("notify flag (an inbox of ", layout->lanes,
                                " lanes; a lane is claimed at the first "
                                "notified write)");
}

absl::Status UcxEndpoint::PostRead(const LocalSlice& dst,
                                   const RemoteSlice& src, Completion done) {
  RETURN_IF_ERROR(CheckTransfer(dst, src, state_->peer_rank, kBackend));
  RETURN_IF_ERROR(CheckPostable());
  ASSIGN_OR_RETURN(ucp_rkey_h rkey, RemoteKey(*src.region));
  return PostData(/*is_write=*/false, dst, src, rkey, std::move(done));
}

absl::Status UcxEndpoint::PostFlush(Completion done) {
  RETURN_IF_ERROR(CheckPostable());
  if (state_->copies && !state_->wrote_through_ucx && state_->in_flight.empty() &&
      state_->sequence.empty()) {
    // Every write to this peer was a copy, done when it was posted, and
    // every read UCX took has finished: there is nothing to flush.
    UcxOps::CompleteNow(*state_, std::move(done));
    return absl::OkStatus();
  }
  auto* op = new UcxOp{UcxOp::Kind::kFlush, "flush", state_, std::move(done)};
  ++state_->outstanding;
  if (state_->sequence.empty()) {
    IssueFlush(op);
  } else {
    state_->sequence.push_back(op);  // After the pending notifications.
  }
  return absl::OkStatus();
}

absl::StatusOr<std::byte*> UcxEndpoint::MapRemote(const RemoteSlice& remote) {
  RETURN_IF_ERROR(CheckRemoteSlice(remote, state_->peer_rank, kBackend));
  if (state_->closed) {
    return UcxOps::ClosedError(*state_);
  }
  if (state_->ep == nullptr) {  // the transport gave it up: its peer died
    return absl::UnavailableError(absl::StrCat("endpoint to rank ", state_->peer_rank,
                                               " failed: ", state_->failure.message()));
  }
  // A key of its own, kept until our Close() (ucx_internal.h).
  ASSIGN_OR_RETURN(ucp_rkey_h rkey, UnpackKey(*remote.region));
  void* mapped = nullptr;
  const ucs_status_t status = ucp_rkey_ptr(rkey, remote.address(), &mapped);
  if (status == UCS_OK) {
    state_->mapped_rkeys.push_back(rkey);
  } else {
    ucp_rkey_destroy(rkey);
    return absl::UnimplementedError(absl::StrCat(
        "UCX cannot map ", remote.region->DebugString(), " of rank ",
        state_->peer_rank, " into this process (", ucs_status_string(status),
        "): only a same-host peer's shared memory maps; use posts"));
  }
  return static_cast<std::byte*>(mapped);
}

absl::Status UcxEndpoint::Close() {
  if (state_->closed) return absl::OkStatus();
  state_->closed = true;
  absl::Status released = UcxOps::ReleaseEndpoint(state_);
  // Nothing of UCX's uses a mapping's key (no operation names it): the
  // segments are detached now, whatever the close still waits for.
  for (ucp_rkey_h rkey : state_->mapped_rkeys) ucp_rkey_destroy(rkey);
  state_->mapped_rkeys.clear();
  return released;
}

void UcxOps::DestroyRemoteKeys(UcxEndpointState& state) {
  for (auto& [key, rkey] : state.rkeys) ucp_rkey_destroy(rkey);
  state.rkeys.clear();
  if (state.inbox_rkey != nullptr) ucp_rkey_destroy(state.inbox_rkey);
  state.inbox_rkey = nullptr;
  state.inbox = nullptr;
  state.lane.reset();
  state.mappings.clear();
  state.last_rkey = nullptr;
  state.last_key.clear();
  state.last_address = 0;
  state.last_length = 0;
  state.last_mapping = {};
}

bool UcxOps::NoticeExitedPeer(UcxEndpointState& state) {
  if (!state.watched || !IsProcessGone(state.peer_identity)) return false;
  if (state.failure.ok()) {
    state.failure = absl::UnavailableError(
        absl::StrCat("peer rank ", state.peer_rank, " (pid ",
                     state.peer_identity.pid,
                     ") has exited; its operations cannot complete"));
  }
  return true;
}

void UcxOps::AbandonInFlight(UcxEndpointState& state) {
  std::vector<UcxOp*> stuck(state.in_flight.begin(), state.in_flight.end());
  state.in_flight.clear();
  for (UcxOp* op : stuck) {
    auto it = std::find(state.sequence.begin(), state.sequence.end(), op);
    if (it != state.sequence.end()) state.sequence.erase(it);
    absl::Status status = Translate(*op, UCS_ERR_CANCELED);
    Complete(op, std::move(status), /*abandon=*/true);
  }
}

absl::Status UcxOps::ReleaseEndpoint(
    const std::shared_ptr<UcxEndpointState>& shared) {
  UcxEndpointState& state = *shared;
  UcxWorkerState& worker = *state.worker;
  absl::Status result;
  if (state.ep != nullptr) {
    ucp_ep_h ep = state.ep;
    state.ep = nullptr;
    ucp_request_param_t param{};
    if (state.watched) {
      // Graceful (flush) close: UCX 1.13 answers a forced close of an
      // endpoint without peer error handling with UCS_ERR_INVALID_PARAM and
      // leaves it open, wire-up and all, until the worker is destroyed.
      ucs_status_ptr_t request = ucp_ep_close_nbx(ep, &param);
      if (UCS_PTR_IS_PTR(request)) {
        worker.closing.push_back({request, shared});
      } else {
        // An endpoint UCX already failed (its peer died) may refuse; only
        // an unexpected refusal is worth a line.
        if (UCS_PTR_IS_ERR(request) && state.failure.ok()) {
          std::fprintf(
              stderr, "rdmaflow: closing the UCX endpoint to rank %d: %s\n",
              state.peer_rank, ucs_status_string(UCS_PTR_STATUS(request)));
        }
        DestroyRemoteKeys(state);
      }
    } else {
      // Forced close: UCX cancels every request still in flight.
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;
      ucs_status_ptr_t request = ucp_ep_close_nbx(ep, &param);
      if (UCS_PTR_IS_PTR(request)) {
        const absl::Time deadline = absl::Now() + kCloseTimeout;
        while (ucp_request_check_status(request) == UCS_INPROGRESS &&
               absl::Now() < deadline) {
          ucp_worker_progress(worker.worker);
        }
        if (ucp_request_check_status(request) == UCS_INPROGRESS) {
          result = absl::DeadlineExceededError(absl::StrCat(
              "closing the UCX endpoint to rank ", state.peer_rank,
              " did not finish in ", absl::FormatDuration(kCloseTimeout)));
        }
        ucp_request_free(request);
      } else if (UCS_PTR_IS_ERR(request)) {
        result = UcsToStatus(
            UCS_PTR_STATUS(request),
            absl::StrCat("closing the UCX endpoint to rank ", state.peer_rank));
      }
      DestroyRemoteKeys(state);
    }
  }
  // Requests UCX did not cancel (after a forced close), or that will never
  // finish (a dead peer), still owe their callbacks: complete them here,
  // exactly once.
  if (!state.watched || !state.failure.ok()) AbandonInFlight(state);
  // Whatever had not gone out yet completes with the failure or kCancelled.
  PumpSequence(state);
  return result;
}

std::string UcxEndpoint::LanesOf(ucp_ep_h ep) {
  char* text = nullptr;
  size_t size = 0;
  FILE* stream = open_memstream(&text, &size);
  if (stream == nullptr) return "";
  ucp_ep_print_info(ep, stream);
  std::fclose(stream);
  std::string result(text, size);
  std::free(text);
  return result;
}

std::string UcxEndpoint::Describe() const {
  if (state_->ep == nullptr) return state_->notify;
  return absl::StrCat(state_->notify, "\n", LanesOf(state_->ep));
}

}  // namespace rdmaflow::rdma::ucx
