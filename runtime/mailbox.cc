// File: mailbox.cc
#include "runtime/mailbox.h"

#include <atomic>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rdma/blocking.h"
#include "rdma/rendezvous.h"

namespace rdmaflow::runtime {
namespace {

constexpr size_t kAlign = 64;

size_t RoundUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
// A slot: the stamp word, padded to kAlign, then the message.
size_t SlotBytes(size_t bytes) { return kAlign + RoundUp(bytes); }

std::string InboxKey(int rank) { return absl::StrCat("mailbox/", rank); }

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
  std::unique_ptr<Mailbox> box(
      new Mailbox(transport, store, ns, rank, world, bytes, timeout));
  ASSIGN_OR_RETURN(rdma::MemoryRegion inbox, transport.Allocate(world * SlotBytes(bytes)));
  ASSIGN_OR_RETURN(rdma::MemoryRegion outbox, transport.Allocate(SlotBytes(bytes)));
  std::memset(inbox.data(), 0, inbox.size());  // every stamp 0: nothing sent
  box->inbox_ = std::make_unique<rdma::MemoryRegion>(std::move(inbox));
  box->outbox_ = std::make_unique<rdma::MemoryRegion>(std::move(outbox));
  RETURN_IF_ERROR(rdma::PublishAddress(store, ns, transport));
  RETURN_IF_ERROR(rdma::PublishRegion(store, ns, InboxKey(rank), box->inbox_->descriptor()));
  return box;
}

Mailbox::Mailbox(rdma::Transport& transport, rdma::Store& store, std::string ns,
                 int rank, int world, size_t bytes, absl::Duration timeout)
    : transport_(transport),
      store_(store),
      ns_(std::move(ns)),
      rank_(rank),
      world_(world),
      bytes_(bytes),
      timeout_(timeout),
      endpoints_(world),
      remote_(world),
      sent_(world, 0),
      delivered_(world, 0),
      copy_(bytes) {}

absl::Status Mailbox::Connect(int peer) {
  if (peer < 0 || peer >= world_ || peer == rank_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mailbox of rank ", rank_, ": no peer ", peer, " in a world of ", world_));
  }
  if (endpoints_[peer] != nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(rdma::RemoteRegion remote,
                   rdma::FetchRegion(store_, ns_, InboxKey(peer), timeout_));
  if (remote.owner_rank != peer || remote.length < world_ * SlotBytes(bytes_)) {
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
  const size_t slot = rank_ * SlotBytes(bytes_);
  RETURN_IF_ERROR(rdma::Write(transport_, *endpoints_[peer], {outbox_.get(), 0, 8},
                              {remote_[peer].get(), slot, 8}, std::nullopt, deadline));
  return rdma::Flush(transport_, *endpoints_[peer], deadline);
}

absl::Status Mailbox::Send(int peer, const std::byte* data) {
  if (peer < 0 || peer >= world_ || endpoints_[peer] == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "mailbox of rank ", rank_, ": Send() to rank ", peer, " before Connect()"));
  }
  const absl::Time deadline = absl::Now() + timeout_;
  const uint64_t k = sent_[peer]++;
  RETURN_IF_ERROR(Checked(peer, WriteStamp(peer, 2 * k + 1, deadline)));
  std::memcpy(outbox_->data() + kAlign, data, bytes_);
  const size_t slot = rank_ * SlotBytes(bytes_);
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
  return Checked(peer, rdma::Flush(transport_, *endpoints_[peer], absl::Now() + timeout_));
}

int Mailbox::Collect(
    absl::FunctionRef<void(int sender, const std::byte* message)> deliver) {
  int delivered = 0;
  for (int sender = 0; sender < world_; ++sender) {
    if (sender == rank_) continue;
    const std::byte* slot = inbox_->data() + sender * SlotBytes(bytes_);
    const uint64_t before = LoadStamp(slot);
    if (before == delivered_[sender]) continue;  // nothing new
    if (before % 2 == 1) {
      ++busy_slots_;
      continue;
    }
    std::memcpy(copy_.data(), slot + kAlign, bytes_);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (LoadStamp(slot) != before) {  // overwritten while we copied
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
