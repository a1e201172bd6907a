// File: ibverbs_status.h
// -----------------------------------------------------------------------------
// Where libibverbs results become absl::Status: errno values from the verbs
// calls, and work-completion statuses (`ibv_wc_status`), each with the peer
// and operation named and a hint at what to check.
#ifndef RDMAFLOW_RDMA_IBVERBS_IBVERBS_STATUS_H_
#define RDMAFLOW_RDMA_IBVERBS_IBVERBS_STATUS_H_

#include <infiniband/verbs.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace rdmaflow::rdma::ibverbs {

// `err` is an errno value from the call described by `what`. ENOMEM and
// EAGAIN become kResourceExhausted, ENODEV/ENXIO kUnavailable, EINVAL
// kInvalidArgument, EPERM/EACCES kPermissionDenied, the rest kInternal.
absl::Status VerbsError(int err, absl::string_view what);

// ibv_reg_dmabuf_mr of `bytes` on RDMA device `device` failed with `err`:
// EOPNOTSUPP/ENOTSUP/ENOSYS/EPROTONOSUPPORT (the device or its driver takes
// no dma-buf: Soft-RoCE, siw, old kernels) kUnimplemented, saying that
// device memory goes staged instead; EBADF/EINVAL kInvalidArgument (not a
// dma-buf, or a range outside it); the rest as VerbsError.
absl::Status DmaBufRegistrationError(int err, absl::string_view device, size_t bytes);

// The status of a failed work completion of `op` ("write", "read", ...)
// towards `peer_rank`:
//   IBV_WC_REM_ACCESS_ERR            kPermissionDenied (stale or foreign key)
//   IBV_WC_RETRY_EXC_ERR, RNR_RETRY  kUnavailable (peer dead or unreachable)
//   IBV_WC_WR_FLUSH_ERR              kCancelled (the queue pair was stopped)
//   IBV_WC_REM_INV_REQ_ERR, LOC_*    kInvalidArgument / kInternal
absl::Status WorkCompletionError(ibv_wc_status status, int peer_rank,
                                 absl::string_view op);

}  // namespace rdmaflow::rdma::ibverbs

#endif  // RDMAFLOW_RDMA_IBVERBS_IBVERBS_STATUS_H_
