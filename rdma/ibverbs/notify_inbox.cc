// File: notify_inbox.cc
#include "rdma/ibverbs/notify_inbox.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "rdma/ibverbs/accepted_peers.h"
#include "rdma/ibverbs/ibverbs_internal.h"
#include "rdma/ibverbs/ibverbs_status.h"

namespace rdmaflow::rdma::ibverbs {
namespace {

// Completions taken per ibv_poll_cq.
constexpr int kPollBatch = 32;

}  // namespace

NotifyInbox::NotifyInbox(int rank, ibv_srq* srq, ibv_cq* recv_cq,
                         AcceptedPeers& peers, uint32_t slots)
    : rank_(rank), srq_(srq), recv_cq_(recv_cq), peers_(peers), slots_(slots) {}

absl::Status NotifyInbox::Start(int receives) {
  // Consumed receives go back in batches, a few doorbells per queue.
  repost_batch_ = std::max(1, std::min(32, receives / 8));
  return PostReceives(receives);
}

absl::Status NotifyInbox::PostReceives(int& count) {
  // Linked in batches: one call (and one doorbell) per batch.
  constexpr int kBatch = 32;
  ibv_recv_wr wrs[kBatch];
  while (count > 0) {
    const int n = std::min(count, kBatch);
    for (int i = 0; i < n; ++i) {
      wrs[i] = {};
      wrs[i].num_sge = 0;  // WRITE WITH IMMEDIATE carries no payload.
      wrs[i].next = i + 1 < n ? &wrs[i + 1] : nullptr;
    }
    ibv_recv_wr* bad = nullptr;
    if (int rc = ibv_post_srq_recv(srq_, wrs, &bad); rc != 0) {
      return VerbsError(rc, "ibv_post_srq_recv");
    }
    count -= n;
  }
  return absl::OkStatus();
}

void NotifyInbox::Adopt(std::vector<std::unique_ptr<AcceptedRing>> rings,
                        absl::flat_hash_map<uint32_t, int> ranks) {
  ranks_ = std::move(ranks);
  for (auto& ring : rings) rings_.push_back(std::move(ring));
}

void NotifyInbox::Drop(const std::vector<uint32_t>& qpns) {
  for (uint32_t qpn : qpns) {
    ranks_.erase(qpn);
    rings_.erase(
        std::remove_if(rings_.begin(), rings_.end(),
                       [qpn](const auto& ring) { return ring->qpn == qpn; }),
        rings_.end());
  }
}

absl::StatusOr<int> NotifyInbox::PollReceives() {
  ibv_wc wc[kPollBatch];
  int n = 0;
  int received = 0;
  while ((n = ibv_poll_cq(recv_cq_, kPollBatch, wc)) > 0) {
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) continue;
      if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        auto found = ranks_.find(wc[i].qp_num);
        if (found == ranks_.end()) {
          // Accepted since the last changes were taken: refresh the copy.
          ranks_ = peers_.Ranks();
          found = ranks_.find(wc[i].qp_num);
        }
        const int rank = found == ranks_.end() ? -1 : found->second;
        if (rank < 0) {
          notifications_.CountMalformed(
              absl::StrCat("on queue pair ", wc[i].qp_num,
                           ", which belongs to no connected peer"));
          continue;
        }
        notifications_.Push({rank, ntohl(wc[i].imm_data)});
      }
    }
    received += n;
    if (n < kPollBatch) break;  // Drained.
  }
  if (n < 0) return absl::InternalError("ibv_poll_cq (receive) failed");
  unposted_receives_ += received;
  if (unposted_receives_ >= repost_batch_) {
    if (absl::Status posted = PostReceives(unposted_receives_); !posted.ok())
      return posted;
  }
  return received;
}

int NotifyInbox::PollRings() {
  int delivered = 0;
  for (auto& ring : rings_) {
    delivered += ring->reader->Poll([&](uint32_t value) {
      notifications_.Push({ring->rank, value});
    });
    if (std::optional<uint64_t> due = ring->reader->CreditDue()) {
      // Not marked sent when the post fails: the next poll tries again.
      if (SendCredit(*ring, *due)) ring->reader->CreditSent(*due);
    }
  }
  return delivered;
}

bool NotifyInbox::SendCredit(AcceptedRing& ring, uint64_t consumed) {
  // The source word behind the records, for queue pairs without inline
  // data; a later credit may overwrite it before the adapter reads it,
  // which only sends a newer count.
  uint64_t* source = reinterpret_cast<uint64_t*>(
      ring.memory.data() + size_t{slots_} * kNotifyRecordBytes);
  *source = consumed;
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(source);
  sge.length = kNotifyRecordBytes;
  sge.lkey =
      static_cast<VerbsRegistration*>(ring.memory.registration())->lkey();
  ibv_send_wr wr{};
  wr.wr_id = 0;  // No endpoint has id 0: its completion is ignored.
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (ring.max_inline >= kNotifyRecordBytes) {
    wr.send_flags |= IBV_SEND_INLINE;
  }
  wr.wr.rdma.remote_addr = ring.credit_address;
  wr.wr.rdma.rkey = ring.credit_rkey;
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(ring.qp, &wr, &bad); rc != 0) {
    // The peer's queue pair is failing or gone: it sends nothing more.
    std::fprintf(stderr,
                 "rdmaflow ibverbs: rank %d cannot return notification "
                 "credits to rank %d: %s\n",
                 rank_, ring.rank, std::strerror(rc));
    return false;
  }
  return true;
}

}  // namespace rdmaflow::rdma::ibverbs
