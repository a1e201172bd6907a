// File: queue_pair.cc
#include "rdma/ibverbs/queue_pair.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "rdma/ibverbs/ibverbs_status.h"

namespace rdmaflow::rdma::ibverbs {
namespace {

constexpr int kAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

}  // namespace

absl::StatusOr<QpPtr> CreateQueuePair(const Device& device, ibv_pd* pd,
                                      ibv_cq* send_cq, ibv_cq* recv_cq,
                                      ibv_srq* srq,
                                      const QueuePairOptions& options,
                                      uint32_t* granted_inline) {
  ibv_qp_init_attr init{};
  init.send_cq = send_cq;
  init.recv_cq = recv_cq;
  init.srq = srq;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 0;  // Selective signaling.
  init.cap.max_send_wr = options.send_depth;
  init.cap.max_send_sge = 1;
  init.cap.max_inline_data = options.max_inline;
  QpPtr qp(ibv_create_qp(pd, &init));
  if (qp == nullptr && options.max_inline > 0) {
    // Some devices refuse any inline data: try without.
    init.cap.max_inline_data = 0;
    qp.reset(ibv_create_qp(pd, &init));
  }
  if (qp == nullptr) {
    return VerbsError(errno, absl::StrCat("ibv_create_qp on ", device.name,
                                          " (send depth ",
                                          options.send_depth, ")"));
  }
  *granted_inline = init.cap.max_inline_data;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = device.port;
  attr.qp_access_flags = kAccess;
  if (int rc = ibv_modify_qp(qp.get(), &attr,
                             IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                 IBV_QP_ACCESS_FLAGS);
      rc != 0) {
    return VerbsError(rc, "ibv_modify_qp to INIT");
  }
  return qp;
}

absl::Status ConnectQueuePair(ibv_qp* qp, const Device& device,
                              uint32_t local_psn, const QueuePairInfo& remote,
                              const QueuePairOptions& options) {
  const int rd_atomic =
      std::max(1, std::min(16, device.device_attr.max_qp_rd_atom));
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = static_cast<ibv_mtu>(
      std::min<int>(device.port_attr.active_mtu, remote.mtu));
  attr.dest_qp_num = remote.qpn;
  attr.rq_psn = remote.psn;
  attr.max_dest_rd_atomic = rd_atomic;
  attr.min_rnr_timer = 12;  // 0.64 ms before a receiver-not-ready retry.
  attr.ah_attr.dlid = remote.lid;
  attr.ah_attr.sl = 0;
  attr.ah_attr.port_num = device.port;
  // RoCE needs a GRH on every packet; InfiniBand routes by LID.
  if (device.roce || remote.lid == 0) {
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = remote.gid;
    attr.ah_attr.grh.sgid_index = device.gid_index;
    attr.ah_attr.grh.hop_limit = 64;
  }
  if (int rc = ibv_modify_qp(
          qp, &attr,
          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
              IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
      rc != 0) {
    return VerbsError(rc, absl::StrCat("ibv_modify_qp to RTR towards rank ",
                                       remote.rank, " (QP ", remote.qpn,
                                       "); check the GID index and MTU"));
  }
  attr = {};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = options.timeout;
  attr.retry_cnt = options.retry_count;
  attr.rnr_retry = 7;  // Retry receiver-not-ready forever.
  attr.sq_psn = local_psn;
  attr.max_rd_atomic = rd_atomic;
  if (int rc = ibv_modify_qp(qp, &attr,
                             IBV_QP_STATE | IBV_QP_TIMEOUT |
                                 IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
      rc != 0) {
    return VerbsError(rc, absl::StrCat("ibv_modify_qp to RTS towards rank ",
                                       remote.rank));
  }
  return absl::OkStatus();
}

absl::Status StopQueuePair(ibv_qp* qp) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  if (int rc = ibv_modify_qp(qp, &attr, IBV_QP_STATE); rc != 0) {
    return VerbsError(rc, "ibv_modify_qp to ERR");
  }
  return absl::OkStatus();
}

QueuePairInfo LocalInfo(const Device& device, int rank, const ibv_qp* qp,
                        uint32_t psn) {
  QueuePairInfo info;
  info.rank = rank;
  info.qpn = qp->qp_num;
  info.psn = psn;
  info.lid = device.port_attr.lid;
  info.gid = device.gid;
  info.mtu = device.port_attr.active_mtu;
  return info;
}

}  // namespace rdmaflow::rdma::ibverbs
