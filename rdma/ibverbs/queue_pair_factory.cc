// File: queue_pair_factory.cc
#include "rdma/ibverbs/queue_pair_factory.h"

#include <random>
#include <string>

#include "absl/strings/str_cat.h"

namespace rdmaflow::rdma::ibverbs {

uint32_t RandomPsn() {
  static thread_local std::mt19937 rng(std::random_device{}());
  return rng() & 0xffffff;
}

absl::StatusOr<QpPtr> QueuePairFactory::Create(uint32_t* inline_bytes) const {
  return CreateQueuePair(context->device, context->pd.get(), send_cq, recv_cq,
                         srq, options, inline_bytes);
}

QueuePairInfo QueuePairFactory::Describe(const ibv_qp* qp, uint32_t psn) const {
  QueuePairInfo info = LocalInfo(context->device, rank, qp, psn);
  info.marker_address = reinterpret_cast<uintptr_t>(marker->data());
  absl::StatusOr<uint32_t> rkey =
      UnpackKey(marker->descriptor().packed_key, rank);
  info.marker_rkey = rkey.ok() ? *rkey : 0;
  return info;
}

absl::Status QueuePairFactory::CheckCmDevice(rdma_cm_id* id,
                                             int peer_rank) const {
  const std::string& ours = context->device.name;
  const char* routed =
      id->verbs != nullptr ? ibv_get_device_name(id->verbs->device) : nullptr;
  if (routed != nullptr && ours == routed) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "rdmacm reaches rank ", peer_rank, " through ",
      routed == nullptr ? "no device" : routed, ", not this transport's ", ours,
      "; set device= (or bind_address=) so that they agree"));
}

}  // namespace rdmaflow::rdma::ibverbs
