// File: ucx_endpoint.h
// -----------------------------------------------------------------------------
// UcxEndpoint: Endpoint over one ucp_ep (error handling mode PEER).
#ifndef RDMAFLOW_RDMA_UCX_UCX_ENDPOINT_H_
#define RDMAFLOW_RDMA_UCX_UCX_ENDPOINT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/peer_copy.h"
#include "common/shared_word.h"
#include "rdma/endpoint.h"
#include "rdma/ucx/envelope.h"
#include "rdma/ucx/ucx_internal.h"

namespace rdmaflow::rdma::ucx {

// Thread-compatible, driven by the transport's thread. The transport must
// outlive it.
class UcxEndpoint final : public Endpoint {
 public:
  explicit UcxEndpoint(std::shared_ptr<UcxEndpointState> state)
      : state_(std::move(state)) {}
  ~UcxEndpoint() override;

  int peer_rank() const override { return state_->peer_rank; }
  absl::Status PostWrite(const LocalSlice& src, const RemoteSlice& dst,
                         std::optional<uint32_t> notification,
                         Completion done) override;
  // Into a mapped same-host peer (when no write of this endpoint went
  // through UCX before): the copy, then a release store of the flag. Else
  // the data's put, a flush, then the flag (stored through the mapping, or
  // put).
  absl::Status PostWriteWithFlag(const LocalSlice& src, const RemoteSlice& dst,
                                 const RemoteSlice& flag_word, uint64_t flag,
                                 Completion done) override;
  absl::Status PostRead(const LocalSlice& dst, const RemoteSlice& src,
                        Completion done) override;
  absl::Status PostFlush(Completion done) override;
  absl::Status Close() override;
  // ucp_rkey_ptr(): only a region of a same-host peer allocated in shared
  // memory (Transport::Allocate) maps.
  absl::StatusOr<std::byte*> MapRemote(const RemoteSlice& remote) override;
  absl::Status Prepare(const RemoteRegion& region) override;
  // Checks the slices and resolves the peer's mapped memory once
  // (UcxBoundFlaggedWrite).
  absl::StatusOr<std::unique_ptr<BoundFlaggedWrite>> BindFlaggedWrite(
      const LocalSlice& src, const RemoteSlice& dst, const RemoteSlice& flag_word) override;
  // The same for a read (UcxBoundRead).
  absl::StatusOr<std::unique_ptr<BoundRead>> BindRead(const LocalSlice& dst,
                                                      const RemoteSlice& src) override;

  // How notifications go ("notify flag (lane 3 of 64, 512 slots)", or
  // "notify am" and why), then ucp_ep_print_info() output.
  std::string Describe() const override;
  // ucp_ep_print_info()'s text for `ep`.
  static std::string LanesOf(ucp_ep_h ep);
  // Set at Connect() from the endpoint's lanes (OneTcpLane).
  bool OrdersWrites() const override { return state_->orders_writes; }

  // The peer offered its flag inbox (its worker address): map it and claim
  // a lane, so that notified writes go as flags. Where that cannot be done,
  // they keep going by active message, and Describe() says why.
  void UseFlagInbox(const FlagInboxAddress& inbox);
  // Notifications go by active message, for `why`.
  void NoFlags(absl::string_view why) {
    state_->notify = absl::StrCat("notify am (", why, ")");
  }

 private:
  // kFailedPrecondition once closed, the endpoint's failure once failed.
  absl::Status CheckOpen() const;
  // CheckOpen(), then kResourceExhausted at the limit of operations in
  // flight.
  absl::Status CheckPostable() const;
  // Where a flagged write's data and flag go: their remote keys (the
  // flag's looked up first) and where each lies mapped here (null where it
  // does not, and for a flag that the mapping would misalign).
  struct FlagTargets {
    ucp_rkey_h rkey = nullptr;
    ucp_rkey_h flag_rkey = nullptr;
    std::byte* mapped = nullptr;
    std::byte* flag_mapped = nullptr;
  };
  absl::StatusOr<FlagTargets> ResolveFlagTargets(const RemoteSlice& dst,
                                                 const RemoteSlice& flag_word);
  absl::StatusOr<ucp_rkey_h> RemoteKey(const RemoteRegion& region);
  // A freshly unpacked key of `region` (the caller owns it).
  absl::StatusOr<ucp_rkey_h> UnpackKey(const RemoteRegion& region);
  // Where `region` (under `rkey`) lies here: mapped when UCX maps its key;
  // kInvalidArgument when it maps but its extent does not lie inside one
  // shared mapping of ours.
  absl::StatusOr<UcxEndpointState::Mapping> MapRegion(ucp_rkey_h rkey,
                                                      const RemoteRegion& region);
  // Claims our lane in the peer's inbox; with none free, notifications go
  // by active message from now on.
  void ClaimLane();
  // `remote`, where RemoteKey() just found it mapped here, else nullptr.
  std::byte* MappedAt(const RemoteSlice& remote) const;
  // Room for a record in our lane, or why not.
  absl::Status LaneRoom();
  // A write without notification or a read (checked; `rkey` is the
  // region's): a copy where the region maps here, else a UCX put or get.
  absl::Status PostData(bool is_write, const LocalSlice& local,
                        const RemoteSlice& remote, ucp_rkey_h rkey,
                        Completion done);
  // The data of a notified write going through UCX: a put whose flush
  // (NotifyAfterFlush) reports it.
  absl::Status PutBehindNotification(const LocalSlice& src, const RemoteSlice& dst,
                                     ucp_rkey_h rkey);
  // Queues `op`, a notification, in the endpoint's sequence behind a flush:
  // its active message or flag record goes out once the flush is done and
  // every entry before it has (UcxOps::PumpSequence).
  void NotifyAfterFlush(UcxOp* op);
  // A notified write through our lane whose data goes through UCX: the
  // data's put, a flush, then the record.
  absl::Status PostFlagged(const LocalSlice& src, const RemoteSlice& dst,
                           ucp_rkey_h rkey, uint32_t notification,
                           Completion done);

  std::shared_ptr<UcxEndpointState> state_;
};

// Operation bookkeeping shared by the endpoint and the transport's progress.
struct UcxOps {
  // Whether `state`'s endpoint takes a post now: open, not failed, and
  // under its limit of operations in flight (UcxEndpoint::CheckPostable
  // says why not).
  static bool CanPost(const UcxEndpointState& state) {
    return IsOpen(state) && state.outstanding < state.worker->max_outstanding_per_endpoint;
  }
  // Whether `state`'s endpoint is open and not failed: what a write done
  // before its post returns needs (UcxEndpoint::CheckOpen says why not).
  static bool IsOpen(const UcxEndpointState& state) {
    return !state.closed && state.failure.ok();
  }

  // kFailedPrecondition: the endpoint to `state`'s peer is closed.
  static absl::Status ClosedError(const UcxEndpointState& state);

  // A flagged write into mapped memory: the copy, then the flag's release
  // store, which orders it after this copy and every earlier one, then the
  // completion queued, off the peer's wait.
  static void CopyAndFlag(UcxEndpointState& state, std::byte* to, const std::byte* from,
                          size_t length, std::byte* flag_to, uint64_t flag, Completion done) {
    CopyAndStoreFlag(state, to, from, length, flag_to, flag);
    CompleteNow(state, std::move(done));
  }
  // A transfer through a mapping of a same-host peer's shared memory: the
  // copy, then a fence that keeps later loads and stores, ours or UCX's,
  // behind it (a read's loads before what its caller does next, a write's
  // stores before a later flag). A write into the peer copies as
  // CopyToPeer (common/peer_copy.h) does, streaming from the transport's
  // threshold; a read into our memory, plainly.
  static void CopyMapped(std::byte* to, const std::byte* from, size_t length) {
    std::memcpy(to, from, length);
    std::atomic_thread_fence(std::memory_order_acq_rel);
  }
  static void CopyIntoMapped(const UcxEndpointState& state, std::byte* to,
                             const std::byte* from, size_t length) {
    CopyToPeer(to, from, length, state.worker->streaming_copy_min);
    std::atomic_thread_fence(std::memory_order_acq_rel);
  }

  // The copy and the flag's release store alone: the whole of a write
  // posted with no completion (UcxBoundFlaggedWrite::TryPostInline).
  static void CopyAndStoreFlag(const UcxEndpointState& state, std::byte* to,
                               const std::byte* from, size_t length, std::byte* flag_to,
                               uint64_t flag) {
    CopyToPeer(to, from, length, state.worker->streaming_copy_min);
    StoreSharedWord(flag_to, flag);
  }

  // Queues the completion of an operation of `state`'s that was done when
  // it was posted. Without a reference to the state: a copy of the shared
  // pointer is a locked instruction, which costs more than the copy a
  // mapped write is. The endpoint's destructor retires the state while
  // such completions are queued.
  static void CompleteNow(UcxEndpointState& state, Completion done) {
    ++state.outstanding;
    state.worker->completions.Push(std::move(done), absl::OkStatus(),
                                   /*keep=*/nullptr, &state.outstanding);
  }

  // Called with the result of an operation's UCX request; queues its
  // completion or advances its notification.
  static void OnRequestStatus(UcxOp* op, ucs_status_t status);

  // Sends the notifications and issues the flushes that are due, in order.
  static void PumpSequence(UcxEndpointState& state);

  // Queues `op`'s completion with `status` and frees `op`, unless UCX still
  // holds its request (`abandon`), in which case the UCX callback frees it.
  static void Complete(UcxOp* op, absl::Status status, bool abandon = false);
  // Queues a completion of `state`'s: `done` fires with `status` in the
  // next Progress(), and the endpoint's outstanding count drops then.
  static void Queue(std::shared_ptr<UcxEndpointState> state, Completion done,
                    absl::Status status);

  // Ends our use of the UCX endpoint and completes what had not gone out
  // yet (kCancelled, or the endpoint's failure).
  //  * Peer error handling (other hosts and PID namespaces): a forced close,
  //    which cancels what UCX holds; waits for it (kDeadlineExceeded if UCX
  //    does not finish) and destroys the remote keys.
  //  * Watched same-host peers: UCX 1.13 refuses to force-close an endpoint
  //    without peer error handling, so the close is graceful: it flushes
  //    what UCX holds (those operations complete normally: their buffers
  //    may be in use until then) and finishes in the transport's Progress()
  //    (UcxTransport::PollClosing), which then destroys the remote keys. A
  //    dead peer's operations are failed at once instead: they would never
  //    finish.
  static absl::Status ReleaseEndpoint(
      const std::shared_ptr<UcxEndpointState>& state);

  // Completes, with the endpoint's failure or kCancelled, every operation
  // whose UCX request has not called back; UCX's late callback frees it.
  static void AbandonInFlight(UcxEndpointState& state);

  static void DestroyRemoteKeys(UcxEndpointState& state);

  // For a watched peer (same host and PID namespace) whose process has
  // exited or begun to: records the endpoint's failure, naming the peer,
  // unless it has one. Returns whether the peer is gone.
  static bool NoticeExitedPeer(UcxEndpointState& state);

  // The status an operation reports for UCX's `status`: the endpoint's
  // failure (naming the peer) once it failed, kCancelled once closed.
  static absl::Status Translate(const UcxOp& op, ucs_status_t status);
};

}  // namespace rdmaflow::rdma::ucx

#endif  // RDMAFLOW_RDMA_UCX_UCX_ENDPOINT_H_
