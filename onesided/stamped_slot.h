// File: stamped_slot.h
// -----------------------------------------------------------------------------
// The stamped single-writer slot: one writer publishes whole payloads into a
// slot that readers copy out without any exchange with it, and a reader
// never takes a half-written payload for a whole one (a seqlock). The
// Mailbox (a peer writes by one-sided WRITE, we read our memory) and the
// VersionedBuffer (we write our memory, peers read by one-sided READ) are
// built on it; the checks on what the writer puts in the stamp live here,
// once.
//
// The protocol. A slot is an 8-byte stamp word and a payload. The writer
// numbers what it publishes 1, 2, 3, ... (its sequence; 0 is "nothing yet")
// and brackets payload s with stamps:
//
//   WritingStamp(s) = 2s - 1   then the payload   then WholeStamp(s) = 2s
//
// each step visible to readers before the next starts (a flushed one-sided
// WRITE, or a store followed by a fence). Stamps of a slot only go up. A
// reader loads the stamp, copies the payload, loads the stamp again: an
// even stamp that did not change proves the copy whole; a slot being
// overwritten is reported busy, never torn.
//
// The stamp is written by the writer into memory the reader trusts nothing
// about. The reader (StampedSlotReader) remembers the last whole stamp it
// took; a stamp below it, or a stamp going back between the two loads of
// one read, fails the writer with kDataLoss for good (RisingWord). A stamp
// that jumps forward is accepted (a writer faster than its reader); one that
// stays odd forever is busy forever, which costs the reader nothing. The
// stamp sizes, offsets and indexes nothing.
//
// Layout. Slots are placed by their users (StampedSlot: where the stamp word
// and the payload lie in a region); Packed() is the usual one: the stamp
// word padded to kSlotAlign bytes, then the payload rounded up to
// kSlotAlign, sizes computed without wrapping.
//
//   // writer, into a peer's slot (Mailbox::Send):
//   std::memcpy(staging.data() + kSlotAlign, data, bytes);
//   RETURN_IF_ERROR(WriteRemote(loop, endpoint, staging, remote,
//                               StampedSlot::Packed(base, bytes), ++sent,
//                               deadline));
//   // reader, of a slot in our memory (Mailbox::Collect):
//   ASSIGN_OR_RETURN(SlotRead got, reader.TryReadLocal(
//       inbox.data(), StampedSlot::Packed(base, bytes), copy.data()));
#ifndef RDMAFLOW_ONESIDED_STAMPED_SLOT_H_
#define RDMAFLOW_ONESIDED_STAMPED_SLOT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "onesided/progress/waits.h"
#include "rdma/blocking.h"
#include "rdma/endpoint.h"
#include "rdma/memory_region.h"
#include "rdma/remote_region.h"
#include "rdma/transport.h"

namespace rdmaflow::onesided {

// --- Stamps
// -------------------------------------------------------------------

// The largest sequence number whose stamps fit in 64 bits.
inline constexpr uint64_t kMaxSequence = (uint64_t{1} << 63) - 1;

// For 1 <= sequence <= kMaxSequence.
constexpr uint64_t WritingStamp(uint64_t sequence) { return 2 * sequence - 1; }
constexpr uint64_t WholeStamp(uint64_t sequence) { return 2 * sequence; }

// Stamp words in this process's memory (8-byte aligned): an acquire load, a
// release store.
uint64_t LoadStamp(const std::byte* base, size_t offset);
void StoreStamp(std::byte* base, size_t offset, uint64_t stamp);

// --- Layout
// -------------------------------------------------------------------

// Stamp words and payloads start on cache lines, so a payload never shares
// one with a stamp the writer is changing.
inline constexpr size_t kSlotAlign = 64;

// `bytes` rounded up to kSlotAlign; nullopt when that does not fit in size_t.
std::optional<size_t> AlignUp(size_t bytes);

// Where one slot lies in a region: its stamp word and its payload. Value type.
struct StampedSlot {
  size_t stamp_offset = 0;  // 8-byte aligned
  size_t payload_offset = 0;
  size_t payload_bytes = 0;

  // The bytes a packed slot of `payload_bytes` takes: the stamp word padded
  // to kSlotAlign, then the payload rounded up to kSlotAlign. nullopt when
  // that does not fit in size_t.
  static std::optional<size_t> PackedBytes(size_t payload_bytes);
  // The packed slot starting at `base` (PackedBytes() accepted its size).
  static StampedSlot Packed(size_t base, size_t payload_bytes) {
    return {base, base + kSlotAlign, payload_bytes};
  }
};

// --- Peer-written words
// ---------------------------------------------------------

// A word a peer writes into memory we read, that may stay or go up but never
// go back, nor exceed `limit`: a slot's stamp, a buffer's latest version. The
// first value that breaks this fails the word with kDataLoss for good, and
// the message (also written to stderr) names the writer, the word and both
// values. Thread-compatible.
class RisingWord {
 public:
  // `writer`: who writes it, for messages ("versioned buffer 'p' of rank
  // 0"); `what`: the word ("its header"); `unit`: what its values count,
  // printed before each ("version "), or ""; `limit`: the largest value
  // that may be written (kMaxSequence for a sequence number, whose stamps
  // must fit).
  RisingWord(std::string writer, std::string what, std::string unit = "",
             uint64_t limit = ~uint64_t{0});

  // OK when `value` is neither below last() nor above the limit; the
  // kDataLoss error otherwise, and from then on. Does not move last().
  absl::Status Check(uint64_t value);
  // The same, for `value` loaded after `earlier` (which passed Check()) in
  // one read: it must not be below `earlier` either.
  absl::Status CheckAfter(uint64_t earlier, uint64_t value);
  // Check(), then remembers `value` as last().
  absl::Status Advance(uint64_t value);

  // The last value accepted (0 at first).
  uint64_t last() const { return last_; }
  // OK, or the kDataLoss error for good.
  const absl::Status& status() const { return status_; }

 private:
  absl::Status Fail(std::string problem);

  const std::string writer_;
  const std::string what_;
  const std::string unit_;
  const uint64_t limit_;
  uint64_t last_ = 0;
  absl::Status status_;
};

// --- Reader
// -------------------------------------------------------------------

// What one attempt at reading a slot found.
enum class SlotRead {
  kUnchanged,  // the whole stamp last taken: nothing new
  kBusy,       // being written, or overwritten while we copied: try again
  kWhole,      // a whole payload, copied; last_whole() is its stamp
};

// The reader's side of one slot (one writer). Thread-compatible.
class StampedSlotReader {
 public:
  // `writer` and `what` name the writer and the slot in messages, as for
  // RisingWord ("mailbox 'ns' of rank 0: rank 1", "the stamp of its slot").
  StampedSlotReader(std::string writer, std::string what);

  // One attempt: `before` is the stamp as first loaded; `copy()` copies the
  // payload out; `reload()` loads the stamp again. Without `sequence`, any
  // whole stamp above last_whole() is taken; with it, only
  // WholeStamp(*sequence) (1 <= *sequence <= kMaxSequence, or 0 for a slot
  // nothing was written to), and any other stamp is kBusy. kDataLoss, for
  // good, when a stamp goes back (below last_whole(), or between the two
  // loads); copy()'s and reload()'s errors as they are.
  absl::StatusOr<SlotRead> TryRead(
      uint64_t before, absl::FunctionRef<absl::Status()> copy,
      absl::FunctionRef<absl::StatusOr<uint64_t>()> reload,
      std::optional<uint64_t> sequence = std::nullopt);

  // TryRead() of `slot` in this process's memory at `base` (written by a
  // peer's one-sided WRITEs), copying its payload to `into`.
  absl::StatusOr<SlotRead> TryReadLocal(const std::byte* base,
                                        const StampedSlot& slot,
                                        std::byte* into);

  // The stamp of the last whole payload taken (0 at first).
  uint64_t last_whole() const { return stamp_.last(); }
  // OK, or kDataLoss for good once the writer broke the protocol.
  const absl::Status& status() const { return stamp_.status(); }

 private:
  RisingWord stamp_;
};

// --- Writer
// -------------------------------------------------------------------

// The writer's bracket around payload `sequence` (1..kMaxSequence, above
// any it published in this slot before): put_stamp(WritingStamp),
// put_payload(), put_stamp(WholeStamp). Each call must return only once what
// it wrote is visible to readers. Stops at the first error and returns it.
absl::Status WriteBracket(uint64_t sequence,
                          absl::FunctionRef<absl::Status(uint64_t)> put_stamp,
                          absl::FunctionRef<absl::Status()> put_payload);

// The bracket on `slot` in this process's memory at `base` (readers read it
// by one-sided READ): `fill(payload)` must write all payload_bytes.
void WriteLocal(std::byte* base, const StampedSlot& slot, uint64_t sequence,
                absl::FunctionRef<void(std::byte* payload)> fill);
// The same with the stamp word at `stamp_base + stamp_offset` and the
// payload elsewhere, `payload` (device memory, say: `fill` must then have
// finished its device work when it returns), and a `fill` that may fail:
// its error returns, and the stamp stays odd ("being written") until a
// later write of this or a higher sequence.
absl::Status WriteLocal(std::byte* stamp_base, size_t stamp_offset, std::byte* payload,
                        uint64_t sequence,
                        absl::FunctionRef<absl::Status(std::byte* payload)> fill);

// The bracket on slot `at` of a peer's region by one-sided WRITEs, each one
// flushed before the next (so the peer sees them in order whatever the
// transport reorders). `staging` is a registered packed slot at offset 0
// whose payload (at kSlotAlign, at.payload_bytes long) the caller has
// filled; its stamp word is ours to write. Waits through `loop` (the
// transport's) until `deadline`; errors are the transport's (kUnavailable,
// kDeadlineExceeded: a write in flight is then ended by `fence`, by default
// by closing the endpoint: progress/waits.h).
absl::Status WriteRemote(ProgressLoop& loop, rdma::Endpoint& endpoint,
                         rdma::MemoryRegion& staging,
                         const rdma::RemoteRegion& remote,
                         const StampedSlot& at, uint64_t sequence,
                         absl::Time deadline, const Fence& fence = nullptr);

}  // namespace rdmaflow::onesided

#endif  // RDMAFLOW_ONESIDED_STAMPED_SLOT_H_
