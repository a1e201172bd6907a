// File: mailbox.cc
#include "onesided/mailbox.h"

#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rdma/blocking.h"

namespace rdmaflow::onesided {
namespace {

// The store scope: <ns>/mailbox/<rank> is the inbox, <ns>/mailbox/<rank>/layout
// its layout (the keys the hostile tests forge).
constexpr char kScope[] = "mailbox";
std::string Layout(int world, size_t bytes) {
  return absl::StrCat(world, " slots of ", bytes, " bytes");
}

absl::Status CheckArguments(int rank, int world, size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("mailbox of 0-byte messages");
  if (rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("mailbox: rank ", rank, " is outside a world of ", world));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Mailbox>> Mailbox::Create(
    ProgressLoop& loop, rdma::Store& store, const std::string& ns, int rank,
    int world, size_t bytes, absl::Duration timeout) {
  RETURN_IF_ERROR(CheckArguments(rank, world, bytes));
  rdma::Transport& transport = loop.transport();
  if (rank != transport.rank()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mailbox: rank ", rank, " is not the rank of its transport (", transport.rank(), ")"));
  }
  ASSIGN_OR_RETURN(OwnLinks own, MakeOwnLinks(transport, store, ns, &loop, {}, timeout,
                                              absl::StrCat("mailbox '", ns, "'")));
  ASSIGN_OR_RETURN(std::unique_ptr<Mailbox> box, Create(*own.links, world, bytes, timeout));
  box->own_ = std::move(own);
  return box;
}

absl::StatusOr<std::unique_ptr<Mailbox>> Mailbox::Create(PeerLinks& links, int world,
                                                         size_t bytes, absl::Duration timeout) {
  const int rank = links.rank();
  RETURN_IF_ERROR(CheckArguments(rank, world, bytes));
  const std::optional<size_t> slot_bytes = StampedSlot::PackedBytes(bytes);
  size_t inbox_bytes = 0;
  if (!slot_bytes.has_value() ||
      __builtin_mul_overflow(*slot_bytes, static_cast<size_t>(world),
                             &inbox_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("mailbox of rank ", rank, ": an inbox of ", world,
                     " slots of ", bytes, "-byte messages overflows size_t"));
  }
  // The memory first: the copy buffer of `bytes` is only made once the
  // transport has agreed to twice as much.
  rdma::Transport& transport = links.transport();
  ASSIGN_OR_RETURN(rdma::MemoryRegion inbox, transport.Allocate(inbox_bytes));
  ASSIGN_OR_RETURN(rdma::MemoryRegion outbox, transport.Allocate(*slot_bytes));
  std::unique_ptr<Mailbox> box(new Mailbox(links, world, bytes, *slot_bytes, timeout));
  std::memset(inbox.data(), 0, inbox.size());  // every stamp 0: nothing sent
  box->inbox_ = std::make_unique<rdma::MemoryRegion>(std::move(inbox));
  box->outbox_ = std::make_unique<rdma::MemoryRegion>(std::move(outbox));
  // The layout before the region: a peer that found the region finds it.
  RETURN_IF_ERROR(links.Publish(box->Published()));
  return box;
}

Mailbox::Mailbox(PeerLinks& links, int world, size_t bytes, size_t slot_bytes,
                 absl::Duration timeout)
    : links_(links),
      loop_(links.loop()),
      rank_(links.rank()),
      world_(world),
      bytes_(bytes),
      slot_bytes_(slot_bytes),
      timeout_(timeout),
      endpoints_(world, nullptr),
      fences_(world),
      remote_(world),
      sent_(world, 0),
      copy_(bytes) {
  senders_.reserve(world);
  for (int sender = 0; sender < world; ++sender) {
    senders_.emplace_back(
        absl::StrCat("mailbox '", links.ns(), "' of rank ", rank_, ": rank ", sender),
        "the stamp of its slot");
  }
}

RegionSet Mailbox::Published() const {
  return RegionSet{kScope, Layout(world_, bytes_), {{"", inbox_.get()}}};
}

absl::Status Mailbox::Connect(int peer) {
  if (peer < 0 || peer >= world_ || peer == rank_) {
    return absl::InvalidArgumentError(absl::StrCat("mailbox of rank ", rank_,
                                                   ": no peer ", peer,
                                                   " in a world of ", world_));
  }
  if (endpoints_[peer] != nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(PeerRegions theirs,
                   links_.Fetch(Published(), peer,
                                absl::StrCat("mailbox '", links_.ns(), "' of rank ", rank_)));
  rdma::RemoteRegion& remote = theirs.regions[0];
  // world_ * slot_bytes_ did not wrap (Create()).
  if (remote.owner_rank != peer || remote.length < world_ * slot_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mailbox of rank ", peer, ": the descriptor (", remote.DebugString(),
        ") does not hold ", world_, " slots of ", bytes_, " bytes"));
  }
  ASSIGN_OR_RETURN(rdma::Endpoint * endpoint, links_.Lane(peer));
  // Its key now, while the peer holds the inbox (Endpoint::Prepare).
  RETURN_IF_ERROR(endpoint->Prepare(remote));
  endpoints_[peer] = endpoint;
  fences_[peer] = links_.FenceOn(
      peer, absl::StrCat("mailbox of rank ", rank_, " gave up a send to rank ", peer));
  remote_[peer] = std::make_unique<rdma::RemoteRegion>(std::move(remote));
  return absl::OkStatus();
}

absl::Status Mailbox::Checked(int peer, absl::Status status) {
  if (status.ok()) return status;
  status = absl::Status(status.code(), absl::StrCat("mailbox of rank ", rank_,
                                                    ": sending to rank ", peer, ": ",
                                                    status.message()));
  // The peer is gone: every protocol on the links hears of it. (A write
  // that timed out was fenced on the links: fences_.)
  if (absl::IsUnavailable(status)) links_.Sever(peer, status);
  return status;
}

absl::Status Mailbox::Send(int peer, const std::byte* data) {
  if (peer < 0 || peer >= world_ || endpoints_[peer] == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("mailbox of rank ", rank_,
                                                      ": Send() to rank ", peer,
                                                      " before Connect()"));
  }
  RETURN_IF_ERROR(senders_[peer].status());
  // Severed (by this mailbox or another protocol on the links): why.
  RETURN_IF_ERROR(links_.PeerStatus(peer));
  std::memcpy(outbox_->data() + kSlotAlign, data, bytes_);
  return Checked(
      peer, WriteRemote(loop_, *endpoints_[peer], *outbox_, *remote_[peer],
                        StampedSlot::Packed(rank_ * slot_bytes_, bytes_),
                        ++sent_[peer], absl::Now() + timeout_, fences_[peer]));
}

absl::Status Mailbox::ProbeAllowed(int peer, absl::string_view call) const {
  if (peer < 0 || peer >= world_ || endpoints_[peer] == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("mailbox of rank ", rank_, ": ", call, " of rank ", peer,
                     " before Connect()"));
  }
  RETURN_IF_ERROR(senders_[peer].status());
  // Severed (by this mailbox or another protocol on the links): why.
  return links_.PeerStatus(peer);
}

absl::Status Mailbox::Probe(int peer) {
  RETURN_IF_ERROR(ProbeAllowed(peer, "Probe()"));
  return Checked(peer, Flush(loop_, *endpoints_[peer], absl::Now() + timeout_, fences_[peer]));
}

absl::Status Mailbox::PostProbe(int peer, rdma::Completion done) {
  RETURN_IF_ERROR(ProbeAllowed(peer, "PostProbe()"));
  return endpoints_[peer]->PostFlush(std::move(done));
}

absl::Status Mailbox::PeerStatus(int peer) const {
  if (peer < 0 || peer >= world_) {
    return absl::InvalidArgumentError(absl::StrCat("mailbox of rank ", rank_,
                                                   ": no peer ", peer,
                                                   " in a world of ", world_));
  }
  return senders_[peer].status();
}

int Mailbox::Collect(
    absl::FunctionRef<void(int sender, const std::byte* message)> deliver) {
  int delivered = 0;
  for (int sender = 0; sender < world_; ++sender) {
    if (sender == rank_) continue;
    // A sender that broke the protocol is failed for good (PeerStatus()),
    // and the error was logged when it was found.
    absl::StatusOr<SlotRead> read = senders_[sender].TryReadLocal(
        inbox_->data(), StampedSlot::Packed(sender * slot_bytes_, bytes_),
        copy_.data());
    if (!read.ok()) continue;
    if (*read == SlotRead::kBusy) ++busy_slots_;
    if (*read != SlotRead::kWhole) continue;
    deliver(sender, copy_.data());
    ++delivered;
  }
  return delivered;
}

}  // namespace rdmaflow::onesided
