// File: verbs_raii.h
// -----------------------------------------------------------------------------
// One std::unique_ptr type per libibverbs object, each with a deleter that
// releases it and logs (never throws) when that fails. Declare members in
// creation order so that destruction replays rdma-core's cleanup ladder: QP,
// then CQ and SRQ, then MR, then PD, then the device context.
#ifndef RDMAFLOW_RDMA_IBVERBS_VERBS_RAII_H_
#define RDMAFLOW_RDMA_IBVERBS_VERBS_RAII_H_

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace rdmaflow::rdma::ibverbs {
namespace internal {

inline void LogFailure(const char* what, int rc) {
  if (rc != 0) {
    std::fprintf(stderr, "rdmaflow ibverbs: %s failed: %s\n", what,
                 std::strerror(rc > 0 ? rc : errno));
  }
}

}  // namespace internal

struct DeviceListDeleter {
  void operator()(ibv_device** list) const { ibv_free_device_list(list); }
};
struct ContextDeleter {
  void operator()(ibv_context* c) const {
    internal::LogFailure("ibv_close_device", ibv_close_device(c));
  }
};
struct PdDeleter {
  void operator()(ibv_pd* pd) const {
    internal::LogFailure("ibv_dealloc_pd", ibv_dealloc_pd(pd));
  }
};
struct ChannelDeleter {
  void operator()(ibv_comp_channel* channel) const {
    internal::LogFailure("ibv_destroy_comp_channel",
                         ibv_destroy_comp_channel(channel));
  }
};
struct CqDeleter {
  void operator()(ibv_cq* cq) const {
    internal::LogFailure("ibv_destroy_cq", ibv_destroy_cq(cq));
  }
};
struct SrqDeleter {
  void operator()(ibv_srq* srq) const {
    internal::LogFailure("ibv_destroy_srq", ibv_destroy_srq(srq));
  }
};
struct QpDeleter {
  void operator()(ibv_qp* qp) const {
    internal::LogFailure("ibv_destroy_qp", ibv_destroy_qp(qp));
  }
};
struct MrDeleter {
  void operator()(ibv_mr* mr) const {
    internal::LogFailure("ibv_dereg_mr", ibv_dereg_mr(mr));
  }
};

using DeviceList = std::unique_ptr<ibv_device*, DeviceListDeleter>;
using ContextPtr = std::unique_ptr<ibv_context, ContextDeleter>;
using PdPtr = std::unique_ptr<ibv_pd, PdDeleter>;
using ChannelPtr = std::unique_ptr<ibv_comp_channel, ChannelDeleter>;
using CqPtr = std::unique_ptr<ibv_cq, CqDeleter>;
using SrqPtr = std::unique_ptr<ibv_srq, SrqDeleter>;
using QpPtr = std::unique_ptr<ibv_qp, QpDeleter>;
using MrPtr = std::unique_ptr<ibv_mr, MrDeleter>;

}  // namespace rdmaflow::rdma::ibverbs

#endif  // RDMAFLOW_RDMA_IBVERBS_VERBS_RAII_H_
