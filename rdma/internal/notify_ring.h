// File: notify_ring.h
// -----------------------------------------------------------------------------
// Flag notifications: how a notified write tells its target "your bytes are
// there" without a receive completion or a message: a ring of 8-byte
// records in the target's memory, written behind the data, which the
// target's Progress() polls and delivers in sequence. Two backends use it:
//   - ibverbs (notify=flag): a ring per accepted queue pair; the data and an
//     inline 8-byte RDMA WRITE of the record go in one doorbell, and the
//     queue pair places its writes in order;
//   - UCX over shared memory: a lane of a transport's flag inbox per
//     writer (rdma/ucx/flag_inbox.h); the record is stored after the data's
//     copy, or after the flush of its put.
//
// A record is the 32-bit notification in its low half and a 32-bit tag in
// its high half: the notification's sequence number (from 1, modulo 2^32).
// The reader delivers slot (n mod slots) only when its tag is n + 1, so a
// record of an earlier lap is never taken for a new one.
//
// Flow control: the writer may have at most `slots` records the reader has
// not consumed. The reader writes its consumed count back into a word the
// writer names in its handshake, every slots/4 records; the writer reads it
// when the ring looks full. That count is written by the peer: a count above
// what was posted, or one that goes back, is refused (kDataLoss).
//
// Pure logic over memory: the transport writes the records and credits.
#ifndef RDMAFLOW_RDMA_INTERNAL_NOTIFY_RING_H_
#define RDMAFLOW_RDMA_INTERNAL_NOTIFY_RING_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rdmaflow::rdma {

inline constexpr uint32_t kMinNotifySlots = 4;
inline constexpr uint32_t kMaxNotifySlots = uint32_t{1} << 16;
inline constexpr size_t kNotifyRecordBytes = 8;

// The record of notification number `seq` (from 1) carrying `value`.
uint64_t NotifyRecord(uint64_t seq, uint32_t value);

// A ring the peer announced: kInvalidArgument naming `peer_rank` unless
// `slots` is a power of two in [kMinNotifySlots, kMaxNotifySlots], `address`
// is 8-byte aligned and the ring does not wrap the address space.
absl::Status ValidateNotifyRing(uint64_t address, uint32_t slots,
                                int peer_rank);

// The target's side of one ring. Single-thread (the Progress() thread).
class NotifyRingReader {
 public:
  // `ring`: `slots` records, zeroed, written by the peer.
  NotifyRingReader(const uint64_t* ring, uint32_t slots);

  // Delivers, in order, every record that has arrived, at most `max`;
  // returns how many. A bound keeps a writer that forges records as fast
  // as they are read from holding the reader's loop.
  int Poll(absl::FunctionRef<void(uint32_t value)> deliver,
           uint64_t max = std::numeric_limits<uint64_t>::max());

  // The consumed count to write back to the writer when one is due (a
  // quarter of the ring consumed since the last one sent).
  std::optional<uint64_t> CreditDue() const;
  // That count went out.
  void CreditSent(uint64_t consumed) { credited_ = consumed; }

  uint64_t consumed() const { return consumed_; }

 private:
  const uint64_t* ring_;
  uint32_t mask_;
  uint64_t consumed_ = 0;
  uint64_t credited_ = 0;
  uint64_t credit_every_;
};

// The writer's side of one ring. Single-thread.
class NotifyRingWriter {
 public:
  // `credit`: the word the reader writes its consumed count into.
  NotifyRingWriter(const uint64_t* credit, uint32_t slots, int peer_rank);

  // Whether the next record may be written now. kDataLoss when the count
  // the peer wrote is above what was posted or below what it said before.
  absl::StatusOr<bool> HasRoom();

  struct Next {
    uint32_t slot;    // Index into the ring.
    uint64_t record;  // Its 8 bytes.
  };
  // The next record; call only after HasRoom() said true.
  Next Take(uint32_t value);
  // Gives back the record Take() just returned, which was never posted.
  void Untake() { --posted_; }

  uint64_t posted() const { return posted_; }

 private:
  const uint64_t* credit_;
  uint32_t slots_;
  int peer_rank_;
  uint64_t posted_ = 0;
  uint64_t consumed_ = 0;
};

}  // namespace rdmaflow::rdma

#endif  // RDMAFLOW_RDMA_INTERNAL_NOTIFY_RING_H_
