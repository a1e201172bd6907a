// File: mailbox.h
// -----------------------------------------------------------------------------
// Mailboxes: the push side of one-sided exchange. Every rank owns an inbox
// with one slot per rank of the job; a sender writes a whole message of
// `bytes` into its own slot at the receiver with one-sided WRITEs, and the
// receiver picks complete messages out of its inbox without any exchange
// with the sender. Gossip's push mode (strategies/gossip) uses it.
//
// Each slot is a stamped slot (stamped_slot.h): message k is bracketed by
// stamps 2k-1 (being written) and 2k (whole). Send() writes the bracket with
// one-sided WRITEs, each flushed before the next; Collect() copies a slot
// out between two loads of its stamp: an even stamp that has not changed
// proves the copy whole; a slot being overwritten is left for the next
// Collect() (never a torn message).
//
// A stamp is written by the peer into our memory, so it is untrusted: stamps
// only go up (a sender counts its messages from 1 for the life of the
// mailbox; a sender that restarts needs a new namespace), and a slot whose
// stamp goes back fails its sender with kDataLoss for good: nothing more is
// read from its slot, and Send()/Probe() to it return that error. Sizes come
// only from this rank's arguments, checked without wrapping; a peer's inbox
// must have been created with the same world and message size (its layout
// in the store is compared in Connect()).
//
// In memory: the inbox is `world` packed slots (StampedSlot::Packed), the
// sender of rank r writing the r-th; the outbox is one packed slot, the
// staging copy of what this rank sends.
//
// Its connections are a PeerLinks' (onesided/links): the data lane to each
// peer, shared with the other protocols on the links. A Send() or Probe()
// that finds the peer gone (kUnavailable) severs it on the links, so every
// protocol there hears of it. A Send() or Probe() that times out after
// posting is fenced on the links (PeerLinks::FenceOn): its write is waited
// for, and the peer severed only if it hangs, so the mailbox shares its
// links with the other protocols of a strategy (gossip's readers).
//
//   ASSIGN_OR_RETURN(auto box, Mailbox::Create(links, world, bytes, timeout));
//   RETURN_IF_ERROR(box->Connect(peer));      // after the peer's Create()
//   RETURN_IF_ERROR(box->Send(peer, data));  // bytes() bytes
//   box->Collect([&](int sender, const std::byte* message) { ... });
#ifndef RDMAFLOW_ONESIDED_MAILBOX_H_
#define RDMAFLOW_ONESIDED_MAILBOX_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "onesided/links/peer_links.h"
#include "onesided/progress/progress_loop.h"
#include "onesided/progress/waits.h"
#include "onesided/stamped_slot.h"
#include "rdma/endpoint.h"
#include "rdma/memory_region.h"
#include "rdma/store.h"
#include "rdma/transport.h"

namespace rdmaflow::onesided {

// Single-thread: every call but Collect() and PeerStatus() runs on the
// links' ProgressLoop thread; Send() and Probe() wait through the loop,
// which keeps running the other protocols registered with it while they
// wait. Connect() waits up to the links' timeout, Send() and Probe() up to
// the mailbox's.
class Mailbox {
 public:
  // Allocates the inbox (`world` slots of `bytes`) and an outbox from the
  // links' transport, and publishes the inbox as <ns>/mailbox/<rank> (and
  // its layout, world and bytes, as <ns>/mailbox/<rank>/layout), <ns> the
  // links' and <rank> theirs: one mailbox per links. The links must outlive
  // the mailbox.
  // kInvalidArgument for 0 bytes, a rank outside [0, world), or an inbox
  // whose size overflows size_t; Allocate's errors.
  static absl::StatusOr<std::unique_ptr<Mailbox>> Create(PeerLinks& links, int world,
                                                         size_t bytes, absl::Duration timeout);
  // The same on links of its own over `loop`'s transport (`loop` must
  // outlive the mailbox), under `ns`; `rank` must be the transport's
  // (kInvalidArgument otherwise).
  static absl::StatusOr<std::unique_ptr<Mailbox>> Create(
      ProgressLoop& loop, rdma::Store& store, const std::string& ns, int rank,
      int world, size_t bytes, absl::Duration timeout);

  size_t bytes() const { return bytes_; }

  // Connects to `peer`'s inbox, waiting up to the timeout for it to be
  // published. kDeadlineExceeded names the peer; kFailedPrecondition quoting
  // both layouts when the peer's mailbox has another world or message size;
  // kInvalidArgument for a descriptor of another rank or too short for the
  // inbox; a second call is a no-op.
  absl::Status Connect(int peer);

  // Writes `data` (bytes() bytes) into this rank's slot at `peer`.
  // kFailedPrecondition before Connect(peer); kUnavailable /
  // kDeadlineExceeded when the peer is gone or silent; PeerStatus(peer)
  // (kDataLoss) once the peer broke the protocol.
  absl::Status Send(int peer, const std::byte* data);

  // Flushes the connection to `peer`: OK while it lives. PeerStatus(peer)
  // once the peer broke the protocol.
  absl::Status Probe(int peer);
  // Probe() without waiting: posts the flush, whose `done` fires from the
  // loop's progress once `peer` answered, or with why not; as
  // VersionedReader::PostProbe (it may not fire while the peer does not
  // progress; it holds no memory, so the caller may stop waiting for it).
  // `done` gets the flush's own status, unnamed, and a peer it finds gone
  // is not severed on the links (it may fire after the mailbox is gone):
  // the caller names it, and says the peer is gone where it keeps track.
  absl::Status PostProbe(int peer, rdma::Completion done);

  // OK, or kDataLoss naming what `peer` wrote into its slot here that no
  // honest sender writes (a stamp going back). kInvalidArgument for a rank
  // outside the world.
  absl::Status PeerStatus(int peer) const;

  // Calls `deliver(sender, message)` for every slot holding a whole message
  // not delivered before, and returns how many it delivered. `message` is a
  // private copy, valid during the call. Slots of senders that broke the
  // protocol are skipped (see PeerStatus()); a sender whose stamp goes back
  // in this call is failed, and its message not delivered.
  int Collect(
      absl::FunctionRef<void(int sender, const std::byte* message)> deliver);

  // Collect() passes over a slot whose sender was writing it.
  int64_t busy_slots() const { return busy_slots_; }

 private:
  Mailbox(PeerLinks& links, int world, size_t bytes, size_t slot_bytes, absl::Duration timeout);
  // What the mailbox publishes, and checks a peer's against.
  RegionSet Published() const;
  // `status` of a Send() or Probe() to `peer`, with the mailbox named; a
  // peer found gone is severed on the links.
  absl::Status Checked(int peer, absl::Status status);
  // Whether `peer` may be probed by `call`: connected, not failed, not
  // severed.
  absl::Status ProbeAllowed(int peer, absl::string_view call) const;

  OwnLinks own_;  // links of its own (the Create() without links), or empty
  PeerLinks& links_;
  ProgressLoop& loop_;  // links_'
  const int rank_;
  const int world_;
  const size_t bytes_;
  const size_t slot_bytes_;  // StampedSlot::PackedBytes(bytes_)
  const absl::Duration timeout_;
  std::unique_ptr<rdma::MemoryRegion> inbox_;
  std::unique_ptr<rdma::MemoryRegion> outbox_;               // one packed slot
  std::vector<rdma::Endpoint*> endpoints_;                   // by peer: the links' data lanes
  // By peer, made by Connect(): how a send or probe that timed out after
  // posting is ended (PeerLinks::FenceOn: the peer severed only if it hangs).
  std::vector<Fence> fences_;
  std::vector<std::unique_ptr<rdma::RemoteRegion>> remote_;  // by peer
  std::vector<uint64_t> sent_;  // messages sent, by peer
  std::vector<StampedSlotReader>
      senders_;  // our view of each sender's slot, by sender
  std::vector<std::byte> copy_;
  int64_t busy_slots_ = 0;
};

}  // namespace rdmaflow::onesided

#endif  // RDMAFLOW_ONESIDED_MAILBOX_H_
