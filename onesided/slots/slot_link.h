// File: slot_link.h
// -----------------------------------------------------------------------------
// SlotLink: the slot rings (slot_ring.h) between this rank and one peer,
// laying out their own memory. A protocol names its rings by shape (name,
// slots, staging bytes per slot) in each direction; the link allocates the
// flag words, credit words, staging slots and the sources of its own
// writes, publishes them and checks the peer's shapes through the job's
// PeerLinks (one typed exchange), and hands out the sending and receiving
// halves with the peer's addresses filled in. What the Messenger (one ring
// each way per peer) and the ring all-reduce (data to the right, call
// descriptors to the left) are built on; no protocol computes another
// rank's offsets by hand.
//
// Memory of one side (byte offsets: SlotLinkLayout; every part starts on a
// 64-byte line):
//   published ("link"), written by the peer:
//     per incoming ring: `slots` flag words, then `slots` staging slots of
//                        `slot_bytes` (none when 0)
//     per outgoing ring: its credit word
//   private, the sources of our writes:
//     per incoming ring: its credit source
//     per outgoing ring: `slots` flag sources, then, with `stage_sends`,
//                        `slots` staging slots the sender copies into
// The peer computes our offsets from the same shapes mirrored: the layout
// both sides publish names each direction's shapes from the lower rank's
// side, so two ranks with different shapes fail to connect (kFailedPrecondition
// quoting both), never write past each other's slots.
//
// Set-up is in two steps, so that a protocol linking to several peers
// publishes every link before it waits on any (no rank waits on one that
// waits on it): Create() allocates and publishes; Connect() waits for the
// peer's record, checks it and builds the halves.
//
// Thread model: the links' (their progress loop's thread), like the halves.
// A link whose halves still have operations posted when it goes (in_flight()
// > 0), or that was told KeepMemory(), leaves its memory and halves in place
// (their completions, or the peer's writes, point at them) and says so on
// stderr: the owner fences first (PeerLinks::Fence).
//
//   SlotLinkOptions options;
//   options.scope = "messenger/m";
//   options.peer = 3;
//   options.out.push_back({"pieces", 8, 64 + 4096, /*stage_sends=*/true});
//   options.in.push_back({"pieces", 8, 64 + 4096});
//   ASSIGN_OR_RETURN(auto link, SlotLink::Create(links, std::move(options)));
//   RETURN_IF_ERROR(link->Connect("messenger 'm' on rank 0"));
//   SlotRingSender& to = link->sender(0);
//   SlotRingReceiver& from = link->receiver(0);
#ifndef RDMAFLOW_ONESIDED_SLOTS_SLOT_LINK_H_
#define RDMAFLOW_ONESIDED_SLOTS_SLOT_LINK_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "onesided/links/peer_links.h"
#include "onesided/slots/slot_ring.h"
#include "rdma/endpoint.h"
#include "rdma/memory_region.h"
#include "rdma/remote_region.h"
#include "rdma/slice.h"

namespace rdmaflow::onesided {

// One ring of a link, as one side sees it.
struct SlotRingShape {
  // Names the ring in the layout and in messages ("pieces", "data").
  std::string name;
  int slots = 0;
  // Staging bytes per slot at the receiver (the payload written into it);
  // 0: the ring carries flags only, its payload goes elsewhere.
  size_t slot_bytes = 0;
  // Sender only: a private staging slot per slot, for payload the sender
  // copies before writing it (rdma::LocalSlice from staged()).
  bool stage_sends = false;
  // The lane this side posts the ring's operations on: the writes and flags
  // of an outgoing ring (the flags elsewhere with `flag_lane`), the credits
  // of an incoming one. Local: the two sides need not agree.
  LaneKind lane = LaneKind::kData;
  // Whose slots, in messages ("rank 3 (the right neighbour)"); "rank <peer>"
  // when empty.
  std::string who;
  // Incoming rings: names message `seq` in errors (SlotRingReceiver).
  std::function<std::string(uint64_t seq)> describe;
  // Outgoing rings: the lane a message's flag goes on, once the flush of
  // its writes completed; unset: `lane`. A flag that waits for a flush
  // would, on the writes' lane, wait behind every write posted while the
  // flush was out, so a sender that runs ahead delays its own flags (the
  // ring all-reduce puts its flags on the control lane). Unused where the
  // writes' lane places its writes in post order (UCX over TCP): the flags
  // then go right behind their writes on it, with no flush between
  // (slot_ring.h; docs/collectives.md).
  std::optional<LaneKind> flag_lane;
};

struct SlotLinkOptions {
  // The protocol instance ("messenger/m", "ring/c10d"): the link's records go
  // under <links' ns>/<scope>/link/<lower rank>-<higher rank>/<rank>/.
  std::string scope;
  // The protocol's own options that every rank must share, checked with
  // the shapes (its layout string); may be empty.
  std::string layout;
  int peer = -1;
  std::vector<SlotRingShape> out;  // rings this rank sends on
  std::vector<SlotRingShape> in;   // rings the peer sends on to this rank
};

// Byte offsets of one side's memory for given incoming and outgoing
// shapes (the layout above). A peer's offsets: swap the two.
class SlotLinkLayout {
 public:
  // kInvalidArgument for a shape with slots < 1, or memory that overflows.
  static absl::StatusOr<SlotLinkLayout> Create(absl::Span<const SlotRingShape> in,
                                               absl::Span<const SlotRingShape> out);

  // Published: incoming ring `i`'s flag words and staging, outgoing `j`'s
  // credit word; bytes of the published region.
  size_t flags(int i) const { return in_[i].flags; }
  size_t staging(int i) const { return in_[i].staging; }
  size_t credit(int j) const { return out_[j].credit; }
  size_t published_bytes() const { return published_bytes_; }
  // Private: outgoing `j`'s flag sources and send staging, incoming `i`'s
  // credit source; bytes of the private region.
  size_t flag_sources(int j) const { return out_[j].flag_sources; }
  size_t send_staging(int j) const { return out_[j].send_staging; }
  size_t credit_source(int i) const { return in_[i].credit_source; }
  size_t private_bytes() const { return private_bytes_; }

 private:
  struct In {
    size_t flags, staging, credit_source;
  };
  struct Out {
    size_t credit, flag_sources, send_staging;
  };
  std::vector<In> in_;
  std::vector<Out> out_;
  size_t published_bytes_ = 0;
  size_t private_bytes_ = 0;
};

// Single-thread (the links' loop's); not copyable.
class SlotLink {
 public:
  // Checks the shapes, allocates and zeroes both regions, and publishes the
  // link's layout and region under the links. kInvalidArgument for a bad
  // peer (this rank, negative), no rings, a shape with slots < 1 or an
  // empty or repeated name; the transport's or store's error.
  static absl::StatusOr<std::unique_ptr<SlotLink>> Create(PeerLinks& links,
                                                          SlotLinkOptions options);
  ~SlotLink();

  SlotLink(const SlotLink&) = delete;
  SlotLink& operator=(const SlotLink&) = delete;

  // Waits (the links' timeout) for the peer's record, checks its layout
  // and region size, prepares its key on each lane used, and builds the
  // halves. `what` names the protocol in messages. PeerLinks::Fetch()'s
  // errors; kDataLoss when the peer's region is smaller than its shapes
  // need; the lane's error. Once only (kFailedPrecondition after a try).
  absl::Status Connect(absl::string_view what);
  bool connected() const { return connected_; }

  int peer() const { return options_.peer; }
  const SlotLinkOptions& options() const { return options_; }
  const SlotLinkLayout& layout() const { return layout_; }
  // The index of the outgoing or incoming ring named `name`, or -1.
  int out_index(absl::string_view name) const;
  int in_index(absl::string_view name) const;

  // The halves (after Connect()): outgoing ring `j`, incoming ring `i`.
  SlotRingSender& sender(int j) { return *senders_[j]; }
  SlotRingReceiver& receiver(int i) { return *receivers_[i]; }
  // The endpoint outgoing ring `j` or incoming ring `i` posts on (an
  // outgoing ring's flags elsewhere with SlotRingShape::flag_lane).
  rdma::Endpoint* out_endpoint(int j) const { return out_endpoints_[j]; }
  rdma::Endpoint* in_endpoint(int i) const { return in_endpoints_[i]; }

  // Incoming ring `i`'s staging slot `slot`, as the peer wrote it.
  const std::byte* received(int i, size_t slot) const {
    return published_->data() + layout_.staging(i) + slot * options_.in[i].slot_bytes;
  }
  // [offset, offset + bytes) of the peer's staging slot `slot` of outgoing
  // ring `j`: where a payload write goes. The caller keeps within the slot.
  rdma::RemoteSlice destination(int j, size_t slot, size_t offset, size_t bytes) const {
    return {&remote_, peer_layout_.staging(j) + slot * options_.out[j].slot_bytes + offset,
            bytes};
  }
  // Outgoing ring `j`'s own staging slot `slot` (stage_sends): where the
  // sender copies a payload, and the slice it writes from.
  std::byte* staging(int j, size_t slot) {
    return private_->data() + layout_.send_staging(j) + slot * options_.out[j].slot_bytes;
  }
  rdma::LocalSlice staged(int j, size_t slot, size_t offset, size_t bytes) const {
    return {private_.get(),
            layout_.send_staging(j) + slot * options_.out[j].slot_bytes + offset, bytes};
  }
  const rdma::MemoryRegion& private_region() const { return *private_; }

  // Operations the halves have posted and not seen complete.
  int64_t in_flight() const;
  // The first failure of a half (a completion's error, a forged word).
  absl::Status failure() const;
  // Leaves the memory registered when the link goes (a peer may still write
  // into it: its owner passed no barrier with the peer).
  void KeepMemory() { keep_memory_ = true; }

 private:
  SlotLink(PeerLinks& links, SlotLinkOptions options, SlotLinkLayout layout,
           SlotLinkLayout peer_layout);
  std::string scope() const;
  std::string Layout() const;

  PeerLinks& links_;
  const SlotLinkOptions options_;
  const SlotLinkLayout layout_;
  // The peer's side (our outgoing rings are its incoming ones): where our
  // writes go in its region.
  const SlotLinkLayout peer_layout_;
  std::unique_ptr<rdma::MemoryRegion> published_;
  std::unique_ptr<rdma::MemoryRegion> private_;
  rdma::RemoteRegion remote_;
  std::vector<rdma::Endpoint*> out_endpoints_;
  std::vector<rdma::Endpoint*> in_endpoints_;
  std::vector<std::unique_ptr<SlotRingSender>> senders_;
  std::vector<std::unique_ptr<SlotRingReceiver>> receivers_;
  bool keep_memory_ = false;
  bool connected_ = false;
  bool tried_ = false;
};

}  // namespace rdmaflow::onesided

#endif  // RDMAFLOW_ONESIDED_SLOTS_SLOT_LINK_H_
