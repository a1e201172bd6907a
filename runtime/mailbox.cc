// File: mailbox.cc
#include "runtime/mailbox.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rdma/blocking.h"
#include "rdma/rendezvous.h"

namespace rdmaflow::runtime {
namespace {

constexpr size_t kAlign = 64;

// A slot: the stamp word, padded to kAlign, then the message rounded up to
// kAlign. nullopt when that does not fit in size_t.
std::optional<size_t> SlotBytes(size_t bytes) {
  size_t padded = 0;
  if (__builtin_add_overflow(bytes, 2 * kAlign - 1, &padded)) return std::nullopt;
  return padded / kAlign * kAlign;
}

std::string InboxKey(int rank) { return absl::StrCat("mailbox/", rank); }
std::string LayoutKey(int rank) { return absl::StrCat("mailbox/", rank, "/layout"); }
std::string Layout(int world, size_t bytes) {
  return absl::StrCat(world, " slots of ", bytes, " bytes");
}

uint64_t LoadStamp(const std::byte* slot) {
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(slot), __ATOMIC_ACQUIRE);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Mailbox>> Mailbox::Create(
    rdma::Transport& transport, rdma::Store& store, const std::string& ns, int rank,
    int world, size_t bytes, absl::Duration timeout) {
  if (bytes == 0) return absl::InvalidArgumentError("mailbox of 0-byte messages");
  if (rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("mailbox: rank ", rank, " is outside a world of ", world));
  }
  const std::optional<size_t> slot_bytes = SlotBytes(bytes);
  size_t inbox_bytes = 0;
  if (!slot_bytes.has_value() ||
      __builtin_mul_overflow(*slot_bytes, static_cast<size_t>(world), &inbox_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mailbox of rank ", rank, ": an inbox of ", world, " slots of ", bytes,
        "-byte messages overflows size_t"));
  }
  // The memory first: the copy buffer of `bytes` is only made once the
  // transport has agreed to twice as much.
  ASSIGN_OR_RETURN(rdma::MemoryRegion inbox, transport.Allocate(inbox_bytes));
  ASSIGN_OR_RETURN(rdma::MemoryRegion outbox, transport.Allocate(*slot_bytes));
  std::unique_ptr<Mailbox> box(
      new Mailbox(transport, store, ns, rank, world, bytes, *slot_bytes, timeout));
  std::memset(inbox.data(), 0, inbox.size());  // every stamp 0: nothing sent
  box->inbox_ = std::make_unique<rdma::MemoryRegion>(std::move(inbox));
  box->outbox_ = std::make_unique<rdma::MemoryRegion>(std::move(outbox));
  RETURN_IF_ERROR(rdma::PublishAddress(store, ns, transport));
  // The layout before the region: a peer that found the region finds it.
  RETURN_IF_ERROR(store.Set(absl::StrCat(ns, "/", LayoutKey(rank)), Layout(world, bytes)));
  RETURN_IF_ERROR(rdma::PublishRegion(store, ns, InboxKey(rank), box->inbox_->descriptor()));
  return box;
}

Mailbox::Mailbox(rdma::Transport& transport, rdma::Store& store, std::string ns,
                 int rank, int world, size_t bytes, size_t slot_bytes,
                 absl::Duration timeout)
    : transport_(transport),
      store_(store),
      ns_(std::move(ns)),
      rank_(rank),
      world_(world),
      bytes_(bytes),
      slot_bytes_(slot_bytes),
      timeout_(timeout),
      endpoints_(world),
      remote_(world),
      sent_(world, 0),
      delivered_(world, 0),
      peer_status_(world),
      copy_(bytes) {}

absl::Status Mailbox::Connect(int peer) {
  if (peer < 0 || peer >= world_ || peer == rank_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mailbox of rank ", rank_, ": no peer ", peer, " in a world of ", world_));
  }
  if (endpoints_[peer] != nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(rdma::RemoteRegion remote,
                   rdma::FetchRegion(store_, ns_, InboxKey(peer), timeout_));
  RETURN_IF_ERROR(rdma::CheckPeerLayout(
      store_, ns_, LayoutKey(peer), Layout(world_, bytes_), peer, timeout_,
      absl::StrCat("mailbox '", ns_, "' of rank ", rank_)));
  // world_ * slot_bytes_ did not wrap (Create()).
  if (remote.owner_rank != peer || remote.length < world_ * slot_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mailbox of rank ", peer, ": the descriptor (", remote.DebugString(),
        ") does not hold ", world_, " slots of ", bytes_, " bytes"));
  }
  ASSIGN_OR_RETURN(endpoints_[peer],
                   rdma::ConnectToPeer(transport_, store_, ns_, peer, timeout_));
  remote_[peer] = std::make_unique<rdma::RemoteRegion>(std::move(remote));
  return absl::OkStatus();
}

absl::Status Mailbox::Checked(int peer, absl::Status status) const {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("mailbox of rank ", rank_,
                                                  ": sending to rank ", peer, ": ",
                                                  status.message()));
}

absl::Status Mailbox::WriteStamp(int peer, uint64_t stamp, absl::Time deadline) {
  __atomic_store_n(reinterpret_cast<uint64_t*>(outbox_->data()), stamp, __ATOMIC_RELEASE);
  const size_t slot = rank_ * slot_bytes_;
  RETURN_IF_ERROR(rdma::Write(transport_, *endpoints_[peer], {outbox_.get(), 0, 8},
                              {remote_[peer].get(), slot, 8}, std::nullopt, deadline));
  return rdma::Flush(transport_, *endpoints_[peer], deadline);
}

absl::Status Mailbox::Send(int peer, const std::byte* data) {
  if (peer < 0 || peer >= world_ || endpoints_[peer] == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "mailbox of rank ", rank_, ": Send() to rank ", peer, " before Connect()"));
  }
  RETURN_IF_ERROR(peer_status_[peer]);
  const absl::Time deadline = absl::Now() + timeout_;
  const uint64_t k = sent_[peer]++;
  RETURN_IF_ERROR(Checked(peer, WriteStamp(peer, 2 * k + 1, deadline)));
  std::memcpy(outbox_->data() + kAlign, data, bytes_);
  const size_t slot = rank_ * slot_bytes_;
  RETURN_IF_ERROR(Checked(
      peer, rdma::Write(transport_, *endpoints_[peer], {outbox_.get(), kAlign, bytes_},
                        {remote_[peer].get(), slot + kAlign, bytes_}, std::nullopt,
                        deadline)));
  RETURN_IF_ERROR(Checked(peer, rdma::Flush(transport_, *endpoints_[peer], deadline)));
  return Checked(peer, WriteStamp(peer, 2 * k + 2, deadline));
}

absl::Status Mailbox::Probe(int peer) {
  if (peer < 0 || peer >= world_ || endpoints_[peer] == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "mailbox of rank ", rank_, ": Probe() of rank ", peer, " before Connect()"));
  }
  RETURN_IF_ERROR(peer_status_[peer]);
  return Checked(peer, rdma::Flush(transport_, *endpoints_[peer], absl::Now() + timeout_));
}

absl::Status Mailbox::PeerStatus(int peer) const {
  if (peer < 0 || peer >= world_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mailbox of rank ", rank_, ": no peer ", peer, " in a world of ", world_));
  }
  return peer_status_[peer];
}

void Mailbox::FailSender(int sender, uint64_t from, uint64_t to) {
  peer_status_[sender] = absl::DataLossError(absl::StrCat(
      "mailbox '", ns_, "' of rank ", rank_, ": rank ", sender,
      " broke the mailbox protocol: the stamp of its slot went back from ", from,
      " to ", to,
      " (stamps only go up; a restarted sender needs a new namespace); is "
      "anything else writing into our memory?"));
  std::fprintf(stderr, "%s\n", std::string(peer_status_[sender].message()).c_str());
}

int Mailbox::Collect(
    absl::FunctionRef<void(int sender, const std::byte* message)> deliver) {
  int delivered = 0;
  for (int sender = 0; sender < world_; ++sender) {
    if (sender == rank_ || !peer_status_[sender].ok()) continue;
    const std::byte* slot = inbox_->data() + sender * slot_bytes_;
    // The stamp is the sender's: only its order with what we delivered
    // matters, never its value (it sizes and indexes nothing).
    const uint64_t before = LoadStamp(slot);
    if (before == delivered_[sender]) continue;  // nothing new
    if (before < delivered_[sender]) {
      FailSender(sender, delivered_[sender], before);
      continue;
    }
    if (before % 2 == 1) {
      ++busy_slots_;
      continue;
    }
    std::memcpy(copy_.data(), slot + kAlign, bytes_);
    std::atomic_thread_fence(std::memory_order_acquire);
    const uint64_t after = LoadStamp(slot);
    if (after < before) {  // went back while we copied
      FailSender(sender, before, after);
      continue;
    }
    if (after != before) {  // overwritten while we copied
      ++busy_slots_;
      continue;
    }
    delivered_[sender] = before;
    deliver(sender, copy_.data());
    ++delivered;
  }
  return delivered;
}

}  // namespace rdmaflow::runtime
