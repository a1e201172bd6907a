// File: accepted_peers.cc
#include "rdma/ibverbs/accepted_peers.h"

#include <cstdio>
#include <string>

#include "rdma/ibverbs/queue_pair.h"

namespace rdmaflow::rdma::ibverbs {
namespace {

// What the handshake listener keeps for a peer that connected to us: its
// queue pair, retired when the listener lets go of it.
class AcceptedQueuePair final : public AcceptedPeer {
 public:
  AcceptedQueuePair(AcceptedPeers* peers, uint32_t qpn)
      : peers_(peers), qpn_(qpn) {}
  ~AcceptedQueuePair() override { peers_->Retire(qpn_); }

 private:
  AcceptedPeers* peers_;
  uint32_t qpn_;
};

}  // namespace

std::unique_ptr<AcceptedPeer> AcceptedPeers::Add(
    uint32_t qpn, int rank, QpPtr qp, std::unique_ptr<AcceptedRing> ring) {
  {
    absl::MutexLock lock(&mutex_);
    rank_of_qp_[qpn] = rank;
    accepted_[qpn] = std::move(qp);
    if (ring != nullptr) new_rings_.push_back(std::move(ring));
    changed_.store(true, std::memory_order_release);
  }
  return std::make_unique<AcceptedQueuePair>(this, qpn);
}

void AcceptedPeers::Retire(uint32_t qpn) {
  absl::MutexLock lock(&mutex_);
  auto it = accepted_.find(qpn);
  if (it == accepted_.end()) return;
  if (absl::Status stopped = StopQueuePair(it->second.get()); !stopped.ok()) {
    std::fprintf(stderr, "rdmaflow ibverbs: retiring queue pair %u: %s\n", qpn,
                 std::string(stopped.message()).c_str());
  }
  retired_.emplace_back(qpn, std::move(it->second));
  accepted_.erase(it);
  changed_.store(true, std::memory_order_release);
}

bool AcceptedPeers::TakeChanges(Changes& changes) {
  if (!changed_.load(std::memory_order_acquire)) return false;
  absl::MutexLock lock(&mutex_);
  changed_.store(false, std::memory_order_relaxed);
  changes.retiring.swap(retired_);
  changes.ranks = rank_of_qp_;
  for (auto& ring : new_rings_) changes.rings.push_back(std::move(ring));
  new_rings_.clear();
  return true;
}

absl::flat_hash_map<uint32_t, int> AcceptedPeers::Ranks() const {
  absl::MutexLock lock(&mutex_);
  return rank_of_qp_;
}

void AcceptedPeers::Forget(const std::vector<uint32_t>& qpns) {
  absl::MutexLock lock(&mutex_);
  for (uint32_t qpn : qpns) rank_of_qp_.erase(qpn);
  retired_count_ += static_cast<int64_t>(qpns.size());
}

size_t AcceptedPeers::accepted() const {
  absl::MutexLock lock(&mutex_);
  return accepted_.size();
}

int64_t AcceptedPeers::retired() const {
  absl::MutexLock lock(&mutex_);
  return retired_count_;
}

}  // namespace rdmaflow::rdma::ibverbs
