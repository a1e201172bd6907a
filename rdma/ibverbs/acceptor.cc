// File: acceptor.cc
#include "rdma/ibverbs/acceptor.h"

#include <memory>
#include <utility>

#include "common/status_macros.h"
#include "rdma/internal/notify_ring.h"

namespace rdmaflow::rdma::ibverbs {

absl::StatusOr<Accepted> Acceptor::Accept(const QueuePairInfo& request) {
  return AcceptQueuePair(request.rank, request.notify_address,
                         request.notify_rkey, [&](ibv_qp* qp, uint32_t psn) {
                           return ConnectQueuePair(qp, factory_.device(), psn,
                                                   request, factory_.options);
                         });
}

absl::StatusOr<CmAccepted> Acceptor::AcceptCm(const CmPeerInfo& request,
                                              rdma_cm_id* id) {
  // The queue pair lives on our device: the connection must come in there.
  RETURN_IF_ERROR(factory_.CheckCmDevice(id, request.rank));
  ASSIGN_OR_RETURN(
      Accepted accepted,
      AcceptQueuePair(request.rank, request.notify_address, request.notify_rkey,
                      [&](ibv_qp* qp, uint32_t) {
                        return ConnectQueuePairWithCm(
                            id, qp, static_cast<uint8_t>(options_.ack_timeout),
                            static_cast<uint8_t>(options_.retry_count));
                      }));
  CmAccepted cm;
  cm.qp_num = accepted.info.qpn;
  cm.answer.rank = factory_.rank;
  cm.answer.marker_address = accepted.info.marker_address;
  cm.answer.marker_rkey = accepted.info.marker_rkey;
  cm.answer.notify_address = accepted.info.notify_address;
  cm.answer.notify_rkey = accepted.info.notify_rkey;
  cm.answer.notify_slots = accepted.info.notify_slots;
  cm.peer = std::move(accepted.peer);
  return cm;
}

absl::StatusOr<Accepted> Acceptor::AcceptQueuePair(
    int rank, uint64_t credit_address, uint32_t credit_rkey,
    absl::FunctionRef<absl::Status(ibv_qp*, uint32_t psn)> connect) {
  uint32_t inline_bytes = 0;
  ASSIGN_OR_RETURN(QpPtr qp, factory_.Create(&inline_bytes));
  const uint32_t psn = RandomPsn();
  RETURN_IF_ERROR(connect(qp.get(), psn));
  Accepted accepted;
  accepted.info = factory_.Describe(qp.get(), psn);
  const uint32_t qpn = qp->qp_num;
  // A ring for the peer's flag notifications, when it named where our
  // credits go (an 8-byte aligned word) and we take flags.
  std::unique_ptr<AcceptedRing> ring;
  if (options_.offer_rings && credit_address != 0 && credit_address % 8 == 0) {
    ring = std::make_unique<AcceptedRing>();
    const size_t bytes = size_t{options_.notify_slots} * kNotifyRecordBytes;
    ASSIGN_OR_RETURN(ring->memory,
                     registrar_.Allocate(bytes + kNotifyRecordBytes));
    ring->qpn = qpn;
    ring->rank = rank;
    ring->qp = qp.get();
    ring->max_inline = inline_bytes;
    ring->reader.emplace(reinterpret_cast<const uint64_t*>(ring->memory.data()),
                         options_.notify_slots);
    ring->credit_address = credit_address;
    ring->credit_rkey = credit_rkey;
    ASSIGN_OR_RETURN(
        accepted.info.notify_rkey,
        UnpackKey(ring->memory.descriptor().packed_key, factory_.rank));
    accepted.info.notify_address =
        reinterpret_cast<uintptr_t>(ring->memory.data());
    accepted.info.notify_slots = options_.notify_slots;
  }
  accepted.peer = peers_.Add(qpn, rank, std::move(qp), std::move(ring));
  return accepted;
}

}  // namespace rdmaflow::rdma::ibverbs
