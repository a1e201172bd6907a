// File: slot_link.cc
#include "onesided/slots/slot_link.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace rdmaflow::onesided {
namespace {

constexpr size_t kLine = 64;
// The version of the layout below, in every link's layout string: a peer
// running another one fails the layout check instead of misreading words.
constexpr int kLayoutVersion = 1;

// Adds `bytes` at the next line boundary of `*end`; false on overflow.
bool Place(size_t* end, size_t bytes, size_t* at) {
  size_t start;
  if (__builtin_add_overflow(*end, kLine - 1, &start)) return false;
  start = start / kLine * kLine;
  if (__builtin_add_overflow(start, bytes, end)) return false;
  *at = start;
  return true;
}

bool Times(size_t a, size_t b, size_t* out) { return !__builtin_mul_overflow(a, b, out); }

std::string Shapes(absl::Span<const SlotRingShape> rings) {
  return absl::StrJoin(rings, ", ", [](std::string* out, const SlotRingShape& ring) {
    absl::StrAppend(out, ring.name, " ", ring.slots, "x", ring.slot_bytes);
  });
}

int IndexOf(absl::Span<const SlotRingShape> rings, absl::string_view name) {
  for (size_t i = 0; i < rings.size(); ++i) {
    if (rings[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

absl::Status CheckShapes(absl::Span<const SlotRingShape> rings, const char* direction) {
  for (size_t i = 0; i < rings.size(); ++i) {
    const SlotRingShape& ring = rings[i];
    if (ring.name.empty() || IndexOf(rings.subspan(0, i), ring.name) >= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "an ", direction, " slot ring needs a name of its own (got '", ring.name, "')"));
    }
    if (ring.slots < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          direction, " slot ring '", ring.name, "': slots must be >= 1 (got ", ring.slots,
          ")"));
    }
    if (ring.flag_lane.has_value() && std::string_view(direction) == "incoming") {
      return absl::InvalidArgumentError(absl::StrCat(
          "incoming slot ring '", ring.name,
          "': flag_lane is the sender's choice (set it on the outgoing shape)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SlotLinkLayout> SlotLinkLayout::Create(absl::Span<const SlotRingShape> in,
                                                      absl::Span<const SlotRingShape> out) {
  SlotLinkLayout layout;
  size_t published = 0;
  size_t own = 0;
  const auto overflow = [](const SlotRingShape& ring) {
    return absl::InvalidArgumentError(absl::StrCat(
        "slot ring '", ring.name, "': ", ring.slots, " slots of ", ring.slot_bytes,
        " bytes do not fit in memory"));
  };
  for (const SlotRingShape& ring : in) {
    if (ring.slots < 1) return absl::InvalidArgumentError("a slot ring needs slots >= 1");
    In at{};
    size_t flags_bytes, staging_bytes;
    if (!Times(ring.slots, kSlotWordBytes, &flags_bytes) ||
        !Times(ring.slots, ring.slot_bytes, &staging_bytes) ||
        !Place(&published, flags_bytes, &at.flags) ||
        !Place(&published, staging_bytes, &at.staging) ||
        !Place(&own, kSlotWordBytes, &at.credit_source)) {
      return overflow(ring);
    }
    layout.in_.push_back(at);
  }
  for (const SlotRingShape& ring : out) {
    if (ring.slots < 1) return absl::InvalidArgumentError("a slot ring needs slots >= 1");
    Out at{};
    size_t flags_bytes, staging_bytes = 0;
    if (!Times(ring.slots, kSlotWordBytes, &flags_bytes) ||
        (ring.stage_sends && !Times(ring.slots, ring.slot_bytes, &staging_bytes)) ||
        !Place(&published, kSlotWordBytes, &at.credit) ||
        !Place(&own, flags_bytes, &at.flag_sources) ||
        !Place(&own, staging_bytes, &at.send_staging)) {
      return overflow(ring);
    }
    layout.out_.push_back(at);
  }
  layout.published_bytes_ = std::max(published, kLine);
  layout.private_bytes_ = std::max(own, kLine);
  return layout;
}

SlotLink::SlotLink(PeerLinks& links, SlotLinkOptions options, SlotLinkLayout layout,
                   SlotLinkLayout peer_layout)
    : links_(links),
      options_(std::move(options)),
      layout_(std::move(layout)),
      peer_layout_(std::move(peer_layout)) {}

SlotLink::~SlotLink() {
  const int64_t never_completed = in_flight();
  if (never_completed == 0 && !keep_memory_) return;
  std::fprintf(stderr,
               "rdmaflow: the slot link of '%s' to rank %d leaves %zu bytes of registered "
               "memory mapped: %s\n",
               options_.scope.c_str(), options_.peer,
               (published_ != nullptr ? published_->size() : 0) +
                   (private_ != nullptr ? private_->size() : 0),
               never_completed > 0
                   ? absl::StrCat(never_completed, " of its operations never completed").c_str()
                   : "its owner passed no barrier with the peer, which may still write into it");
  // Deliberately leaked: a late completion or write points at them.
  published_.release();
  private_.release();
  for (auto& sender : senders_) sender.release();
  for (auto& receiver : receivers_) receiver.release();
}

absl::StatusOr<std::unique_ptr<SlotLink>> SlotLink::Create(PeerLinks& links,
                                                           SlotLinkOptions options) {
  const std::string what = absl::StrCat("slot link '", options.scope, "' of rank ",
                                        links.rank(), " to rank ", options.peer);
  if (options.peer < 0 || options.peer == links.rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the peer must be another rank, >= 0"));
  }
  if (options.out.empty() && options.in.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": no rings either way"));
  }
  if (absl::Status s = CheckShapes(options.out, "outgoing"); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", s.message()));
  }
  if (absl::Status s = CheckShapes(options.in, "incoming"); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", s.message()));
  }
  absl::StatusOr<SlotLinkLayout> layout = SlotLinkLayout::Create(options.in, options.out);
  // The peer's side too (our outgoing rings are its incoming ones, staged
  // there whatever we stage): a shape it cannot lay out is refused here,
  // not by a peer that then never publishes.
  absl::StatusOr<SlotLinkLayout> mirrored = SlotLinkLayout::Create(options.out, options.in);
  if (layout.ok() && !mirrored.ok()) layout = mirrored.status();
  if (!layout.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", layout.status().message()));
  }
  rdma::Transport& transport = links.transport();
  std::unique_ptr<SlotLink> link(
      new SlotLink(links, std::move(options), *std::move(layout), *std::move(mirrored)));
  ASSIGN_OR_RETURN(rdma::MemoryRegion published,
                   transport.Allocate(link->layout_.published_bytes()));
  ASSIGN_OR_RETURN(rdma::MemoryRegion own, transport.Allocate(link->layout_.private_bytes()));
  std::memset(published.data(), 0, published.size());
  std::memset(own.data(), 0, own.size());
  link->published_ = std::make_unique<rdma::MemoryRegion>(std::move(published));
  link->private_ = std::make_unique<rdma::MemoryRegion>(std::move(own));
  RETURN_IF_ERROR(
      links.Publish({link->scope(), link->Layout(), {{"link", link->published_.get()}}}));
  return link;
}

std::string SlotLink::scope() const {
  const int rank = links_.rank();
  return absl::StrCat(options_.scope, "/link/", std::min(rank, options_.peer), "-",
                      std::max(rank, options_.peer));
}

std::string SlotLink::Layout() const {
  // Each direction from the lower rank's side, so that both sides write the
  // same string when their shapes mirror each other.
  const int rank = links_.rank();
  const bool lower = rank < options_.peer;
  const int low = lower ? rank : options_.peer;
  const int high = lower ? options_.peer : rank;
  return absl::StrCat("slot link v", kLayoutVersion, "; ", low, "->", high, ": [",
                      Shapes(lower ? options_.out : options_.in), "]; ", high, "->", low,
                      ": [", Shapes(lower ? options_.in : options_.out), "]; ",
                      options_.layout);
}

int SlotLink::out_index(absl::string_view name) const { return IndexOf(options_.out, name); }
int SlotLink::in_index(absl::string_view name) const { return IndexOf(options_.in, name); }

absl::Status SlotLink::Connect(absl::string_view what) {
  if (tried_) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": the slot link to rank ", options_.peer, " was connected once already"));
  }
  tried_ = true;
  const RegionSet ours{scope(), Layout(), {{"link", published_.get()}}};
  ASSIGN_OR_RETURN(PeerRegions theirs, links_.Fetch(ours, options_.peer, what));
  remote_ = std::move(theirs.regions[0]);
  RETURN_IF_ERROR(CheckRegionBytes(remote_, peer_layout_.published_bytes(),
                                   "its slot link region", what));
  std::vector<rdma::Endpoint*> prepared;
  const auto lane = [&](LaneKind kind) -> absl::StatusOr<rdma::Endpoint*> {
    ASSIGN_OR_RETURN(rdma::Endpoint * endpoint, links_.Lane(options_.peer, kind));
    if (std::find(prepared.begin(), prepared.end(), endpoint) == prepared.end()) {
      // Its key now, while the peer holds the region (Endpoint::Prepare).
      RETURN_IF_ERROR(endpoint->Prepare(remote_));
      prepared.push_back(endpoint);
    }
    return endpoint;
  };
  const auto who = [&](const SlotRingShape& ring) {
    return ring.who.empty() ? absl::StrCat("rank ", options_.peer) : ring.who;
  };
  for (size_t j = 0; j < options_.out.size(); ++j) {
    const SlotRingShape& ring = options_.out[j];
    ASSIGN_OR_RETURN(rdma::Endpoint * endpoint, lane(ring.lane));
    SlotRingSender::Options send;
    send.slots = ring.slots;
    send.peer = who(ring);
    send.endpoint = endpoint;
    if (ring.flag_lane.has_value() && *ring.flag_lane != ring.lane) {
      ASSIGN_OR_RETURN(send.flag_endpoint, lane(*ring.flag_lane));
    }
    send.flag_source = private_.get();
    send.flag_source_offset = layout_.flag_sources(static_cast<int>(j));
    send.remote_flags = &remote_;
    send.remote_flags_offset = peer_layout_.flags(static_cast<int>(j));
    send.credit_word = published_->data() + layout_.credit(static_cast<int>(j));
    out_endpoints_.push_back(endpoint);
    senders_.push_back(std::make_unique<SlotRingSender>(std::move(send)));
  }
  for (size_t i = 0; i < options_.in.size(); ++i) {
    const SlotRingShape& ring = options_.in[i];
    ASSIGN_OR_RETURN(rdma::Endpoint * endpoint, lane(ring.lane));
    SlotRingReceiver::Options receive;
    receive.slots = ring.slots;
    receive.peer = who(ring);
    receive.endpoint = endpoint;
    receive.flags = published_->data() + layout_.flags(static_cast<int>(i));
    receive.credit_source = private_.get();
    receive.credit_source_offset = layout_.credit_source(static_cast<int>(i));
    receive.remote_credit = &remote_;
    receive.remote_credit_offset = peer_layout_.credit(static_cast<int>(i));
    receive.describe = ring.describe;
    in_endpoints_.push_back(endpoint);
    receivers_.push_back(std::make_unique<SlotRingReceiver>(std::move(receive)));
  }
  connected_ = true;
  return absl::OkStatus();
}

int64_t SlotLink::in_flight() const {
  int64_t total = 0;
  for (const auto& sender : senders_) total += sender != nullptr ? sender->outstanding() : 0;
  for (const auto& receiver : receivers_) {
    total += receiver != nullptr ? receiver->outstanding() : 0;
  }
  return total;
}

absl::Status SlotLink::failure() const {
  for (const auto& sender : senders_) {
    if (sender != nullptr && !sender->failure().ok()) return sender->failure();
  }
  for (const auto& receiver : receivers_) {
    if (receiver != nullptr && !receiver->failure().ok()) return receiver->failure();
  }
  return absl::OkStatus();
}

}  // namespace rdmaflow::onesided
