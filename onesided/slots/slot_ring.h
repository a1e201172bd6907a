// File: slot_ring.h
// -----------------------------------------------------------------------------
// The credited slot ring: one direction of a link over one-sided writes,
// the protocol under the Messenger, the ring all-reduce and rdma_copy.
// Written once, with its peer-value checks.
//
// The receiver owns `slots` flag words, one per slot, in registered memory
// the sender writes into; the sender owns one credit word the receiver
// writes into. Message `seq` (0, 1, 2, ...) uses slot `seq % slots`:
//
//   sender:   [payload writes] -> flush; once it completes,
//             flag[seq % slots] := seq + 1
//   receiver: flag == seq + 1 ?  consume ... -> credit := released messages
//   sender:   may claim `seq` while seq - credit < window (<= slots)
//
// The flush orders the flag after the payload, so a receiver that sees the
// flag sees the message whole. Over an endpoint that places its writes in
// post order (Endpoint::OrdersWrites(): UCX over one TCP connection) the
// flag follows the payload at once, on the same endpoint, and a flush
// behind it tells when the payload's sources may be reused:
//
//   sender:   [payload writes] -> flag[seq % slots] := seq + 1 -> flush
//
// which saves the flush's round trip on every message's way to the
// receiver (a ring all-reduce over 1 Gbit/s ran at 72-82 % of the link with
// 1-4 MiB calls, and at the link's rate so: docs/collectives.md). Credits
// are batched: at most one credit write is in flight, and it carries the
// latest count.
//
// Peer-written words are untrusted. A flag may hold only this message's
// number (it arrived) or the number of the slot's previous message (not
// yet); a credit only goes up and never releases more than was claimed.
// Anything else fails the link with kDataLoss naming the peer, for good.
//
// Both halves are single-thread (their owner's progress thread) and post
// only from Post()/PostCredit(). Completions fire inside
// Transport::Progress() and touch only the half that posted them: an owner
// keeps a half alive, and progresses its transport, until outstanding() is
// 0 (close the endpoints first, the flags' too, to cancel what is still
// posted).
#ifndef RDMAFLOW_ONESIDED_SLOTS_SLOT_RING_H_
#define RDMAFLOW_ONESIDED_SLOTS_SLOT_RING_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <set>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "onesided/slots/credit_writer.h"
#include "rdma/endpoint.h"
#include "rdma/memory_region.h"
#include "rdma/remote_region.h"
#include "rdma/slice.h"

namespace rdmaflow::onesided {

// Bytes of a flag or credit word.
inline constexpr size_t kSlotWordBytes = sizeof(uint64_t);

// The sending half. Thread-compatible.
class SlotRingSender {
 public:
  struct Options {
    int slots = 0;
    // Whose slots, in messages: "rank 3", "rank 3 (the right neighbour)".
    std::string peer;
    rdma::Endpoint* endpoint = nullptr;
    // Where the flags are posted, each once its message's flush completed
    // (every write of it is visible at the peer, so any endpoint of the
    // same transport to the same peer, with `remote_flags` prepared on it,
    // may carry the flag); null: `endpoint`. Unused where `endpoint`
    // orders its writes: the flags then go on it, behind their payloads.
    rdma::Endpoint* flag_endpoint = nullptr;
    // `slots` words of ours the flag values are written from.
    const rdma::MemoryRegion* flag_source = nullptr;
    size_t flag_source_offset = 0;
    // The receiver's `slots` flag words.
    const rdma::RemoteRegion* remote_flags = nullptr;
    uint64_t remote_flags_offset = 0;
    // Our credit word, which the receiver writes.
    const std::byte* credit_word = nullptr;
  };

  // `options` must describe `slots` >= 1 words at each place (the owner
  // checked its regions' sizes); the regions and the endpoint must outlive
  // the sender.
  explicit SlotRingSender(Options options);

  // Reads the credit word: the messages the receiver has released.
  // kDataLoss if it went back or releases more than were claimed.
  absl::StatusOr<uint64_t> Credit();
  // Whether message claimed() may be claimed: fewer than `window` (at most
  // `slots`) messages are unreleased. Errors as Credit().
  absl::StatusOr<bool> HasRoom(uint64_t window);
  absl::StatusOr<bool> HasRoom() { return HasRoom(options_.slots); }

  // The next message's number; the caller has checked HasRoom().
  uint64_t Claim() { return claimed_++; }
  size_t slot(uint64_t seq) const { return seq % options_.slots; }

  // Queues a payload write of message `seq` (posted in queue order).
  void Write(uint64_t seq, const rdma::LocalSlice& src, const rdma::RemoteSlice& dst);
  // Queues what publishes message `seq` after its writes: a flush (when it
  // had writes) and, once the flush has completed, its flag; or, where the
  // endpoint orders its writes, the flag, then the flush.
  void Commit(uint64_t seq, bool had_writes = true);

  // Posts what is queued, in order, until done or an endpoint's queue
  // (the writes' or the flags') is full (the rest waits for the next
  // call). A refused post fails the link.
  // Returns failure(). Call it after each Transport::Progress(): completed
  // flushes queue their flags.
  absl::Status Post();

  // Drops what is queued and not posted (giving up on the link).
  void DropQueued() { actions_.clear(); }
  // Calls `visit` on each queued, not yet posted, payload write of messages
  // [first, end); it may change the write's source. For an owner taking
  // back memory those writes would read: it copies the bytes elsewhere and
  // points the writes there.
  void RestageQueued(uint64_t first, uint64_t end,
                     absl::FunctionRef<void(uint64_t seq, rdma::LocalSlice& src)> visit);

  // Messages whose payload writes have all completed (their flush has),
  // counted from 0: what those writes read may be reused.
  uint64_t written() const { return written_; }
  // Whether flags follow their payloads without a flush between them
  // (the endpoint orders its writes).
  bool flags_follow_writes() const { return ordered_; }

  // Messages whose flags have landed, counted contiguously from 0; their
  // payload writes have completed too (written() >= delivered()), so what
  // they read may be reused.
  uint64_t delivered() const { return delivered_; }
  uint64_t claimed() const { return claimed_; }
  uint64_t credit_seen() const { return credit_seen_; }
  int64_t outstanding() const { return outstanding_; }
  bool idle() const { return actions_.empty() && outstanding_ == 0; }
  // Whether anything is queued and not yet posted (Post() met a full queue,
  // or, flushing first, a flag waits for its flush).
  bool has_queued() const { return !actions_.empty(); }
  // The first failure: a completion's error, a refused post, a forged credit.
  const absl::Status& failure() const { return failure_; }

 private:
  struct Action {
    // kFlush: its completion marks the message written and queues its
    // flag; kWritten (ordered endpoints, behind the flag): only marks it.
    enum Kind { kWrite, kFlush, kFlag, kWritten } kind;
    uint64_t seq;
    rdma::LocalSlice src;
    rdma::RemoteSlice dst;
    // kFlag: its completion delivers the message (false where a kWritten
    // behind it does, so that a message is never delivered before its
    // writes completed).
    bool delivers = true;
  };

  void Fail(absl::Status status);
  void Delivered(uint64_t seq);
  rdma::Completion Done();

  const Options options_;
  const bool ordered_;
  std::deque<Action> actions_;
  uint64_t claimed_ = 0;
  uint64_t credit_seen_ = 0;
  uint64_t delivered_ = 0;
  std::set<uint64_t> delivered_out_of_order_;
  uint64_t written_ = 0;
  int64_t outstanding_ = 0;
  absl::Status failure_;
};

// The receiving half. Thread-compatible.
class SlotRingReceiver {
 public:
  struct Options {
    int slots = 0;
    std::string peer;
    rdma::Endpoint* endpoint = nullptr;
    // Our `slots` flag words, which the sender writes.
    const std::byte* flags = nullptr;
    // One word of ours the credit value is written from.
    const rdma::MemoryRegion* credit_source = nullptr;
    size_t credit_source_offset = 0;
    // The sender's credit word.
    const rdma::RemoteRegion* remote_credit = nullptr;
    uint64_t remote_credit_offset = 0;
    // Names message `seq` in errors ("message 3 of 64 of this call");
    // "message <seq>" when unset.
    std::function<std::string(uint64_t seq)> describe;
  };

  explicit SlotRingReceiver(Options options);

  // Whether message received() has arrived (its flag holds received() + 1).
  // kDataLoss, for good, when the flag holds anything but that or the
  // slot's previous message's number.
  absl::StatusOr<bool> Arrived();
  // The slot of message received().
  size_t slot() const { return received_ % options_.slots; }
  // Message received() has been consumed.
  void Consume() { ++received_; }
  uint64_t received() const { return received_; }

  // Writes a credit releasing `released` (<= received()) messages, unless
  // a credit write is in flight or the last one already said as much.
  // Returns failure().
  absl::Status PostCredit(uint64_t released);
  absl::Status PostCredit() { return PostCredit(received_); }

  int64_t outstanding() const { return credits_.outstanding(); }
  // A credit set by PostCredit() and not yet written, or one in flight.
  bool credit_pending() const { return credits_.pending(); }
  const absl::Status& failure() const {
    return failure_.ok() ? credits_.failure() : failure_;
  }

 private:
  void Fail(absl::Status status);

  const Options options_;
  CreditWriter credits_;
  uint64_t received_ = 0;
  absl::Status failure_;  // a forged flag
};

}  // namespace rdmaflow::onesided

#endif  // RDMAFLOW_ONESIDED_SLOTS_SLOT_RING_H_
