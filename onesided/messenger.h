// File: messenger.h
// -----------------------------------------------------------------------------
// Messenger: ordered, reliable, tagged messages between every pair of ranks,
// over one-sided writes into slots the receiver owns. What point-to-point
// send/recv and the non-reducing collectives of the c10d backend
// (torch_backend/) are built on.
//
// Per ordered pair (sender s, receiver r), r's side of their slot link
// (onesided/slots/slot_link.h) holds `slots` slots of a 64-byte header and
// `slot_bytes` of payload, and one flag word per slot.
// A message is cut into pieces of up to `slot_bytes`; piece k of the link is
// a write of header + payload into slot k % slots, a flush, and a write of
// k + 1 into the slot's flag. The receiver polls its flags in local memory,
// in order, copies the piece out to the posted receive it matches (or to an
// unexpected-message buffer), and writes how many pieces it has released
// into the sender's credit word; a sender keeps at most `slots` pieces
// ahead. So a sender never blocks on its receiver's application, messages
// between a pair arrive in the order they were sent, and receives are
// matched by (peer, tag) in any order.
//
// Payload is copied into a registered staging slot, unless it lies in a
// region given to AddSendRegion(): then it is written from where it is.
//
// A peer is declared dead when an operation towards it fails (the transport
// reports kUnavailable), or when a liveness probe (a flush, every
// `liveness_interval` while something waits on the peer) fails; every send
// to and receive from it then completes with that error.
//
// Everything a peer writes into our slots, flags and credit words is untrusted:
// each piece header is checked against the slot size and the message it
// continues (tag, size, offset, piece size) before a byte is copied, and a
// credit may not release more pieces than were sent. A peer that breaks the
// protocol is failed with kDataLoss. Messages that arrive before their
// receive are buffered up to `max_unexpected_bytes` in all; past that, the
// peer's next unexpected message waits in its slot (and the peer on its
// credits) until a matching receive is posted.
//
// A caller that gives up on an operation (a timeout) calls Abandon(): from
// then on the messenger never touches the caller's buffer for it.
//
//   ASSIGN_OR_RETURN(auto messenger, Messenger::Create(transport, store, "job",
//                                                      rank, world, {}));
//   RETURN_IF_ERROR(messenger->Send(peer, tag, data, bytes, on_sent));
//   RETURN_IF_ERROR(messenger->Recv(peer, tag, out, bytes, on_received));
//   while (!done) RETURN_IF_ERROR(messenger->Progress());
#ifndef RDMAFLOW_ONESIDED_MESSENGER_H_
#define RDMAFLOW_ONESIDED_MESSENGER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "onesided/internal/piece_header.h"
#include "onesided/links/peer_links.h"
#include "onesided/progress/progress_loop.h"
#include "onesided/progress/wait_policy.h"
#include "onesided/slots/slot_link.h"
#include "onesided/slots/slot_ring.h"
#include "rdma/endpoint.h"
#include "rdma/memory_region.h"
#include "rdma/remote_region.h"
#include "rdma/store.h"
#include "rdma/transport.h"

namespace rdmaflow::onesided {

struct MessengerOptions {
  // Names the messenger in the store (unique per namespace).
  std::string name = "messenger";
  // Payload bytes per piece (a multiple of 64), and slots per ordered pair.
  size_t slot_bytes = size_t{256} << 10;
  int slots = 8;
  // How long Create() waits for the peers to publish their slot links.
  absl::Duration timeout = absl::Seconds(120);
  // While a send or receive waits on a peer, the peer is probed this often.
  absl::Duration liveness_interval = absl::Seconds(1);
  // The ranks that take part (this one among them, each in [0, world));
  // the others are never connected to, and sends to or receives from them
  // are refused. Empty: every rank of the world. Every member passes the
  // same list.
  std::vector<int> members;
  // Bytes of messages that arrived before their receive, buffered in all.
  size_t max_unexpected_bytes = size_t{1} << 30;
  // How ProgressUntil() idles between passes that move nothing
  // (onesided/progress/wait_policy.h); with `loop`, the loop's policy.
  onesided::WaitPolicy wait = onesided::WaitPolicy::Adaptive();
  // The transport's progress loop, shared with its other protocols (the
  // c10d engine's ring): it must outlive the messenger, which is created,
  // called and destroyed on the loop's thread. Null: the messenger makes a
  // loop of its own (with `wait` and `liveness_interval`). Created on
  // links, the messenger runs on the links' loop (this must be null or it).
  ProgressLoop* loop = nullptr;
};

struct MessengerStats {
  int64_t messages_sent = 0;
  int64_t messages_received = 0;
  int64_t pieces_sent = 0;
  int64_t bytes_sent = 0;
  int64_t staged_bytes = 0;      // payload copied into staging slots
  int64_t unexpected_messages = 0;  // arrived before their receive was posted
  int64_t abandoned = 0;            // operations given up by their caller
};

// Thread-compatible: one thread calls everything, the one that drives
// `transport`.
class Messenger {
 public:
  // Fires once per accepted Send(), from Progress(): OK once the message
  // has been written and is visible at the peer, or the peer's error.
  using SendDone = absl::AnyInvocable<void(absl::Status) &&>;
  // Fires once per accepted Recv(), from Progress() (or from Recv() itself
  // when the message had already arrived): the message's size, or an error
  // (kInvalidArgument when it was larger than the buffer; the peer's error).
  using RecvDone = absl::AnyInvocable<void(absl::StatusOr<size_t>) &&>;
  // Names an accepted Send() or Recv() (never 0).
  using OpId = uint64_t;

  // Makes a slot link to every peer (onesided/slots/slot_link.h: its
  // flags, credits and slots, published under
  // <ns>/messenger/<name>/link/<a>-<b>/<rank>/...), then connects them and
  // uses the links' endpoint to each peer and its watch (onesided/links): the
  // peers must call Create() too. The rank is the links' transport's.
  // kInvalidArgument for bad options or ranks; kFailedPrecondition when a
  // peer used other options; kDeadlineExceeded naming a peer that never came.
  static absl::StatusOr<std::unique_ptr<Messenger>> Create(
      PeerLinks& links, int world, const MessengerOptions& options);
  // The same on links of its own (on options' loop, or a loop of its own),
  // for a messenger alone on its transport. `rank` must be the transport's.
  static absl::StatusOr<std::unique_ptr<Messenger>> Create(
      rdma::Transport& transport, rdma::Store& store, const std::string& ns,
      int rank, int world, const MessengerOptions& options);
  // Stops listening to the peers; messages still in flight are dropped
  // (their peers are severed from the links when they do not complete).
  ~Messenger();

  int rank() const { return rank_; }
  int world() const { return world_; }
  // The ranks that take part, in the options' order (every rank of the
  // world, in order, when the options name none).
  std::vector<int> members() const;
  const MessengerStats& stats() const { return stats_; }

  // Payload inside `region` (which must outlive the messenger) is written
  // to receivers straight from where it lies, without staging.
  void AddSendRegion(const rdma::MemoryRegion* region);

  // Queues `bytes` from `data` for `peer` under `tag`. `data` must stay
  // valid and unchanged until `done` fires (or Abandon() returns).
  // kInvalidArgument for a bad peer (or this rank) or a null `data` with
  // `bytes`; the peer's error when it is known to be dead.
  absl::StatusOr<OpId> Send(int peer, uint64_t tag, const void* data, size_t bytes,
                            SendDone done);

  // Posts a receive of the next message from `peer` under `tag` into `dst`
  // (room for `bytes`). Receives of one (peer, tag) match messages in the
  // order they were sent. kInvalidArgument for a bad peer or a null `dst`
  // with `bytes`; the peer's error when it is known to be dead.
  absl::StatusOr<OpId> Recv(int peer, uint64_t tag, void* dst, size_t bytes,
                            RecvDone done);

  // Gives up on `op`: if its `done` has not fired, it fires now with `why`,
  // and the messenger never reads or writes the caller's buffer for it
  // again. An abandoned send still goes out whole, from a copy of what was
  // not yet sent, so the link stays in step with the receiver; an abandoned
  // receive still consumes the message it would have matched (discarding
  // it), so a later receive of the same tag gets the next one. No-op for an
  // operation that has completed.
  // A send written straight from a send region is taken back from the
  // transport first: its pieces not yet posted are staged, and Abandon()
  // progresses the transport until those posted have been read, for at most
  // `liveness_interval`; past that the peer's endpoint is closed (which
  // cancels them) and the peer is failed with kUnavailable. Not from inside
  // a completion (it progresses the transport).
  void Abandon(OpId op, const absl::Status& why);

  // One round of the progress loop: the transport's completions and every
  // protocol registered with the loop, this messenger's pass among them
  // (consume arrived pieces, post what the credits allow, probe the peers
  // that are waited on). An error only for a transport failure not tied to
  // a peer.
  absl::Status Progress();
  // Whether the last Progress() moved anything (a completion, a piece in
  // or out, a credit): waits spin again instead of backing off.
  bool progressed() const { return progressed_; }

  // Calls Progress() until `done()`, idling between passes that moved
  // nothing as options' `wait` says (ranks may share cores). kDeadlineExceeded ("rank R timed out after ... waiting for
  // <what>") at `deadline`; a Progress() error as is.
  absl::Status ProgressUntil(absl::FunctionRef<bool()> done, absl::Time deadline,
                             absl::string_view what);

  // The error a peer was declared dead with (OK while it is alive).
  absl::Status PeerStatus(int peer) const;

  // Whether sends (abandoned ones included) or receives (not abandoned
  // ones) are still pending.
  bool idle() const;

 private:
  struct Outgoing;
  struct Incoming;
  struct Peer;

  Messenger(PeerLinks& links, int world, const MessengerOptions& options);
  absl::Status Connect();
  std::string Where() const;
  // A slot of a peer's ring: a 64-byte header, then the payload.
  size_t slot_stride() const { return 64 + options_.slot_bytes; }

  void Receive(Peer& peer);
  // Whether `header` (our copy of a slot's) continues the peer's stream
  // correctly; kDataLoss naming what is wrong if not.
  absl::Status CheckPiece(const Peer& peer, const internal::PieceHeader& header) const;
  // Whether an unexpected message of `bytes` must wait for its receive.
  bool MustWait(const Peer& peer, const internal::PieceHeader& header) const;
  // Copies the piece's payload (`header.bytes` at `payload`) to its message.
  void Deliver(Peer& peer, const internal::PieceHeader& header, const std::byte* payload);
  void StartSends(Peer& peer);
  // Posts the queued writes and flags; fires the sends whose last piece's
  // flag has landed.
  void PostActions(Peer& peer);
  void PostCredit(Peer& peer);
  // Registers with the links' progress loop and subscribes to the peers.
  absl::Status JoinLoop();
  // The messenger's share of a loop round; true if it moved anything.
  bool Pass();
  // Takes what the peer wrote before it went, then fails it.
  void PeerDied(Peer& peer, absl::Status status);
  // Fails every operation with the peer (also for a peer that broke the
  // protocol, whose slots are not read again).
  void FailPeer(Peer& peer, absl::Status status);
  const rdma::MemoryRegion* SendRegionOf(const void* data, size_t bytes) const;
  // Abandon()'s part for a send whose pieces are written from a send
  // region: once it returns OK, no write of `message` reads that region
  // again; an error when the posted ones did not complete in time (the
  // caller fails the peer and severs it, which cancels them).
  // [first, end): the message's pieces written from a send region.
  absl::Status TakeBackSendRegion(Peer& peer, uint64_t first, uint64_t end);

  PeerLinks* links_;
  rdma::Transport& transport_;
  const int rank_;
  const int world_;
  const MessengerOptions options_;

  std::vector<const rdma::MemoryRegion*> send_regions_;
  std::vector<std::unique_ptr<Peer>> peers_;  // by rank; null for this rank
  bool closing_ = false;  // in the destructor: completions only count down
  // Made by the Create() without links (destroyed last, links first).
  OwnLinks own_;
  ProgressLoop* loop_ = nullptr;
  int64_t handler_ = 0;
  OpId next_op_ = 1;
  size_t unexpected_bytes_ = 0;  // buffered for messages not yet received
  bool progressed_ = false;
  MessengerStats stats_;
};

}  // namespace rdmaflow::onesided

#endif  // RDMAFLOW_ONESIDED_MESSENGER_H_
