// File: staging.h
// -----------------------------------------------------------------------------
// The staged path of rdma/device (docs/device.md): a write into a device
// region of a peer on another host, where no IPC handle opens, goes through
// pinned host memory in chunks:
//
//   sender                                   target
//   device -> its outbound slot (a copy on
//   the device stream; host memory is
//   written from where it lies)
//   host write -> the target's inbound slot
//   flush, then the slot's header  ------->  header copied once, checked
//                                            host -> device copy (its stream)
//   credit read: the chunk landed  <-------  once the copy's event completed,
//                                            the count of landed chunks is
//                                            written into the sender's credit
//                                            word
//
// A read of the peer's device memory is a request record written into the
// peer's link; the peer answers with chunks as above, each naming the
// request, into the reader's destination (device or host memory); the read
// is done once every chunk of its answer landed.
//
// Each pair of staged peers has a link on each side: a host region of the
// host transport, [credit word | slot headers | slot data], in which the
// peer writes chunks (and we write credits into the peer's). A link's
// descriptor travels through the peer's directory: a host region named in
// every device transport's address, one entry per rank, which a peer writes
// at Connect (body, flush, then its length word). So both ranks must connect
// to each other before a staged write can go; the target must progress, as
// with UCX over TCP.
//
// Everything the peer writes (headers, credits, its directory entry) is
// copied once into private memory, checked with overflow-safe arithmetic,
// and only the copy is used (docs/security.md): a chunk lands only inside a
// device region this transport registered.
#ifndef RDMAFLOW_RDMA_DEVICE_STAGING_H_
#define RDMAFLOW_RDMA_DEVICE_STAGING_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "device/device_runtime.h"
#include "device/event_pool.h"
#include "device/queued_work.h"
#include "rdma/endpoint.h"
#include "rdma/memory_region.h"
#include "rdma/remote_region.h"
#include "rdma/transport.h"

namespace rdmaflow::rdma::device_path {

// The staged path's sizes (DeviceTransportOptions); both ends of a link
// must agree (the address carries them).
struct StagingOptions {
  // Chunks one sender has in flight to one target, and the bytes of each.
  size_t slots = 8;
  size_t slot_bytes = size_t{1} << 20;
  // Ranks 0 .. directory_ranks - 1 can stage with this transport.
  int directory_ranks = 1024;
};

// kInvalidArgument unless 2 <= slots <= 1024, 4 KiB <= slot_bytes <= 64 MiB
// (a multiple of 64) and 1 <= directory_ranks <= 65536.
absl::Status CheckStagingOptions(const StagingOptions& options);

namespace staging_layout {
// A link region: the credit word (chunks of ours the peer has landed,
// written by the peer), one chunk header per slot, one read request per
// slot, then the slots' data.
constexpr size_t kCredit = 0;
constexpr size_t kHeaders = 64;
constexpr size_t kHeaderBytes = 64;
inline size_t RequestOffset(size_t slots) { return kHeaders + slots * kHeaderBytes; }
inline size_t DataOffset(size_t slots) { return RequestOffset(slots) + slots * kHeaderBytes; }
inline size_t LinkBytes(const StagingOptions& o) {
  return DataOffset(o.slots) + o.slots * o.slot_bytes;
}
// A directory entry: the body's length (0 while absent), a check word (the
// body's Fnv1a XOR the writer's incarnation), then the body (a RemoteRegion
// of the link), in kEntryBytes per rank.
constexpr size_t kEntryBytes = 1024;
constexpr size_t kEntryHeaderBytes = 16;
}  // namespace staging_layout

// What a sender writes into a slot's header, after the slot's data (and a
// flush between them, so the data is there before the header). A void
// chunk (address, length and request 0) carries no data: a cancelled
// write's chunk, sent only to keep the sequence; nothing lands. An empty
// answer (address and length 0, a request named) answers a void read
// request; nothing lands either.
struct ChunkHeader {
  uint64_t sequence = 0;  // 1, 2, ...: in slot (sequence - 1) % slots
  uint64_t address = 0;   // where the bytes go: a device address of the target
  uint64_t length = 0;
  uint64_t request = 0;   // 0: a write; else the read request it answers
  uint64_t check = 0;     // HeaderCheck of the four: a torn header fails it
};
constexpr size_t kEncodedHeaderBytes = 40;
uint64_t HeaderCheck(uint64_t sequence, uint64_t address, uint64_t length, uint64_t request);
void EncodeHeader(const ChunkHeader& header, std::byte* out);

// A read request: the reader wants `length` bytes at the peer's device
// address `source` written to its own `destination`. A void request
// (source, length and destination 0) asks for nothing: a read cancelled
// before its request went, sent only to keep the sequence. Its answer is
// one empty chunk (address and length 0, the request named), which tells
// the reader the request was taken and its slot may be written again.
struct ReadRequest {
  uint64_t sequence = 0;  // 1, 2, ...: in request slot (sequence - 1) % slots
  uint64_t source = 0;
  uint64_t length = 0;
  uint64_t destination = 0;
  uint64_t check = 0;
};
void EncodeRequest(const ReadRequest& request, std::byte* out);
// Request `expected` in `slot` (copied once here): nullopt while it is not
// there (older, or caught half written); kDataLoss naming `peer` for
// another sequence or a length above 2^40, or of 0 but for a void request.
absl::StatusOr<std::optional<ReadRequest>> ReadRequestAt(const std::byte* slot, uint64_t expected,
                                                         size_t slots, int peer);

// The header of chunk `expected` in `slot_header` (copied once here):
// nullopt while it is not there (the slot's older sequence, or a header
// caught half written); kDataLoss naming `peer` for a forged one (another
// sequence, a length past a slot, or a length of 0 with an address).
absl::StatusOr<std::optional<ChunkHeader>> ReadHeader(const std::byte* slot_header,
                                                      uint64_t expected, size_t slots,
                                                      size_t slot_bytes, int peer);

// A process's incarnation: a digest of its host transport's address, which
// a restarted process does not share with its earlier self.
uint64_t Incarnation(const std::string& host_address);
// The directory entry that publishes `link` for the writer's `incarnation`,
// and one of any body (a forger can seal what it likes: the check catches
// tearing and stale entries, not forgery).
std::string EncodeEntry(const RemoteRegion& link, uint64_t incarnation);
std::string SealEntry(const std::string& body, uint64_t incarnation);
// The link `peer` published at `entry` (copied once here): nullopt while
// absent, caught half rewritten, or left by another incarnation of the peer
// than `incarnation` (a peer that restarted: its new entry is yet to come)
// -- the check word tells all three; kDataLoss naming the peer for a
// malformed one, or one that is not a host region of `peer` on `backend`
// of at least `link_bytes`.
absl::StatusOr<std::optional<RemoteRegion>> ReadEntry(const std::byte* entry, int peer,
                                                      uint64_t incarnation,
                                                      const std::string& backend,
                                                      size_t link_bytes);

// The device ranges this transport registered: a chunk lands only inside
// one. Shared with the regions, which remove their range when destroyed.
// Thread-safe.
class DeviceRanges {
 public:
  void Add(uintptr_t base, size_t size);
  void Remove(uintptr_t base, size_t size);
  // Whether [address, address + length) lies in one range (overflow-safe).
  bool Contains(uint64_t address, uint64_t length) const;

 private:
  mutable absl::Mutex mu_;
  std::vector<std::pair<uintptr_t, size_t>> ranges_ ABSL_GUARDED_BY(mu_);
};

// One staged peer's link, both roles: chunks we send it, chunks it sends us.
// Driven by the device transport's Progress (Advance). Thread-compatible.
class StagingLink {
 public:
  // Allocates this side's link region (pinned for the device's copies) and
  // the outbound slots, and publishes the link into the peer's directory
  // through `endpoint` (a host endpoint to the peer of the link's own) as
  // Advance runs. `our_entry` is where the peer publishes its link in our
  // directory; only an entry of `peer_incarnation` is taken (Incarnation()
  // of the peer's host address, as Connect was given it).
  static absl::StatusOr<std::unique_ptr<StagingLink>> Create(
      Transport& host, device::DeviceRuntime& runtime, const StagingOptions& options,
      std::unique_ptr<Endpoint> endpoint, const RemoteRegion& peer_directory, int our_rank,
      const std::byte* our_entry, uint64_t peer_incarnation,
      std::shared_ptr<DeviceRanges> ranges);
  ~StagingLink();

  // Queues [src, src + length) for the peer's device address `address`:
  // chunks of at most slot_bytes. `src` is device memory of this runtime
  // (copied to the outbound slot first) or a host region of the host
  // transport (written from where it lies). Returns the last chunk's
  // sequence: the write has landed once Landed() says so.
  uint64_t Stage(const LocalSlice& src, uint64_t address, uint64_t length);
  bool Landed(uint64_t sequence) const { return credited_ >= sequence; }
  // The sequences given out so far: the next Stage's first chunk is one more.
  uint64_t staged() const { return staged_; }
  // Cancels the write of chunks [first, last]: those not yet written to
  // the peer go as void chunks (nothing more of theirs is read, nothing
  // lands; one being copied out of its source goes void once the copy
  // ends); those whose host write is under way run on.
  void CancelWrite(uint64_t first, uint64_t last);
  // Whether nothing of the write of chunks [first, last] reads its source
  // any more: no device copy from it runs, no host write from its region
  // is under way, and nothing of it waits to start but void chunks.
  bool WriteReleased(uint64_t first, uint64_t last) const;

  // Queues a read of `length` bytes at the peer's device address `source`
  // into `destination` (device memory of this runtime, or host memory),
  // which must stay valid until the read is done. Returns its number.
  uint64_t RequestRead(uint64_t source, uint64_t length, std::byte* destination);
  // Whether read `request` (and every earlier one) is done.
  bool ReadDone(uint64_t request) const { return reads_done_ >= request; }
  // Cancels read `request`: the rest of its answer lands nowhere (its
  // chunks are still taken in sequence, checked and counted); a request
  // not yet posted goes void, the peer answers it with one empty chunk,
  // and the read is done only then.
  void CancelRead(uint64_t request);
  // Whether nothing more lands in read `request`'s destination: it is
  // cancelled (or done) and no copy into it runs.
  bool ReadReleased(uint64_t request) const;

  // Moves everything on as far as it can without waiting. The link's
  // error (sticky) once the peer forged a word or a step failed.
  absl::Status Advance(device::Stream& stream);
  // Whether anything is under way either way (the transport then polls
  // instead of sleeping).
  bool busy() const;
  // Bytes of our device memory staged so far to answer the peer's reads
  // (diagnostics).
  uint64_t answered_bytes() const { return answered_bytes_; }
  // The sticky error of Advance (OK while the link works).
  const absl::Status& error() const { return error_; }
  // Device copies still running (the transport drains them before the
  // link's memory goes, and before it cancels a staged operation).
  bool copying() const;
  // For a link that stops (its endpoint closed, its peer gone): notes the
  // device copies that ended, starts nothing.
  void Quiesce();

 private:
  struct Step;
  struct Chunk;
  struct Incoming;
  struct Read;

  StagingLink() = default;
  absl::Status Send(Endpoint& endpoint, device::Stream& stream);
  absl::Status Receive(Endpoint& endpoint, device::Stream& stream);
  absl::Status Publish(Endpoint& endpoint);
  absl::StatusOr<std::unique_ptr<device::Event>> TakeEvent();
  // Back to the free events (a null one is dropped).
  void ReturnEvent(std::unique_ptr<device::Event> event);
  // Queues a copy of `length` bytes on `stream`, its end tracked in
  // `copy`; an error where it was refused (nothing queued).
  absl::Status QueueCopy(device::Stream& stream, void* to, const void* from, uint64_t length,
                         device::QueuedWork& copy);
  // Queues the empty answer to the peer's void read `request`: a chunk
  // whose header alone says the request was taken.
  void StageEmptyAnswer(uint64_t request);
  // Queues chunks of [source, source + length) (a device address of ours)
  // for `address` at the peer, answering `request` (0: a write).
  uint64_t StageChunks(const MemoryRegion* region, size_t offset, const std::byte* device_source,
                       uint64_t address, uint64_t length, uint64_t request);
  absl::Status SendRequests(Endpoint& endpoint);
  absl::Status TakeRequests();
  // Where an incoming chunk may land: a registered device range for a
  // write, the destination of the read it answers for an answer. Whether
  // it lands: not a void chunk, nor an answer to a cancelled read.
  absl::StatusOr<bool> CheckLanding(const ChunkHeader& header);
  StagingOptions options_;
  std::unique_ptr<Endpoint> endpoint_;
  int peer_ = -1;
  int our_rank_ = -1;
  std::string backend_;
  device::DeviceRuntime* runtime_ = nullptr;
  std::shared_ptr<DeviceRanges> ranges_;
  const std::byte* our_entry_ = nullptr;
  uint64_t peer_incarnation_ = 0;  // of the entry our_entry_ must hold
  // Ours: the peer writes chunks and credits here. Outbound: the slots our
  // device copies fill, and the headers and credit word we write from.
  MemoryRegion link_;
  MemoryRegion outbound_;
  MemoryRegion words_;  // [credit source][entry][headers]
  RemoteRegion peer_directory_;
  std::optional<RemoteRegion> peer_link_;
  std::optional<device::EventPool> events_;  // of runtime_, set by Create
  // Publishing our entry: body, flush, length word.
  int publish_step_ = 0;
  std::shared_ptr<Step> publishing_;
  // Sender.
  std::deque<Chunk> chunks_;
  uint64_t staged_ = 0;    // sequences given out
  uint64_t sent_ = 0;      // the highest whose header write was posted
  uint64_t credited_ = 0;  // landed at the peer (its credit word)
  absl::Time waiting_since_ = absl::InfinitePast();  // for the peer's link
  absl::Time last_probe_ = absl::InfinitePast();
  std::shared_ptr<Step> probing_;
  // Reader: our requests, oldest first (sent or not), and how many are done.
  std::deque<Read> reads_;
  uint64_t requested_ = 0;
  uint64_t reads_done_ = 0;
  // Answering: requests of the peer's taken, and their answers not yet
  // all staged.
  struct Answer {
    uint64_t request = 0;
    uint64_t source = 0;
    uint64_t destination = 0;
    uint64_t length = 0;
    uint64_t staged = 0;
  };
  std::deque<Answer> answers_;
  uint64_t requests_taken_ = 0;
  uint64_t answered_bytes_ = 0;
  // Target.
  std::deque<Incoming> incoming_;
  uint64_t accepted_ = 0;  // chunks whose copy is queued
  uint64_t landed_ = 0;    // chunks whose copy completed
  uint64_t credit_sent_ = 0;
  std::shared_ptr<Step> crediting_;
  absl::Status error_;
};

}  // namespace rdmaflow::rdma::device_path

#endif  // RDMAFLOW_RDMA_DEVICE_STAGING_H_
