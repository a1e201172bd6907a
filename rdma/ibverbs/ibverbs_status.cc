// File: ibverbs_status.cc
#include "rdma/ibverbs/ibverbs_status.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace rdmaflow::rdma::ibverbs {

absl::Status VerbsError(int err, absl::string_view what) {
  std::string message = absl::StrCat(what, " failed: ", std::strerror(err));
  switch (err) {
    case ENOMEM:
    case EAGAIN:
      return absl::ResourceExhaustedError(message);
    case ENODEV:
    case ENXIO:
      return absl::UnavailableError(message);
    case EINVAL:
      return absl::InvalidArgumentError(message);
    case EPERM:
    case EACCES:
      return absl::PermissionDeniedError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status DmaBufRegistrationError(int err, absl::string_view device, size_t bytes) {
  const std::string call =
      absl::StrCat("ibv_reg_dmabuf_mr of ", bytes, " bytes of device memory on ", device);
  const std::string what = absl::StrCat(call, " failed: ", std::strerror(err));
  switch (err) {
    case EOPNOTSUPP:
#if ENOTSUP != EOPNOTSUPP
    case ENOTSUP:
#endif
    case ENOSYS:
    case EPROTONOSUPPORT:
      return absl::UnimplementedError(absl::StrCat(
          what, ". The device or its driver does not register dma-buf memory, so there is no "
          "GPUDirect RDMA here (it needs a NIC such as mlx5 on Linux 5.12 or newer, and "
          "rdma-core 34 or newer; Soft-RoCE and siw have none): device memory goes staged "
          "through host memory"));
    case EBADF:
    case EINVAL:
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": the descriptor is not a dma-buf, or the range lies outside it"));
    default:
      return VerbsError(err, call);
  }
}

absl::Status WorkCompletionError(ibv_wc_status status, int peer_rank,
                                 absl::string_view op) {
  std::string what = absl::StrCat(op, " to rank ", peer_rank, " failed (",
                                  ibv_wc_status_str(status), ")");
  switch (status) {
    case IBV_WC_REM_ACCESS_ERR:
      return absl::PermissionDeniedError(absl::StrCat(
          what, ": rank ", peer_rank,
          " refused the remote key or range; is the descriptor stale (its "
          "region freed) or from another transport?"));
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
    case IBV_WC_RESP_TIMEOUT_ERR:
      return absl::UnavailableError(absl::StrCat(
          what, ": rank ", peer_rank,
          " did not answer; the peer process may have died, or the path "
          "(GID index, MTU, link) is wrong"));
    case IBV_WC_WR_FLUSH_ERR:
      return absl::CancelledError(
          absl::StrCat(what, ": the queue pair was stopped"));
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_REM_OP_ERR:
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": rank ", peer_rank, " rejected the request"));
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_LEN_ERR:
    case IBV_WC_LOC_QP_OP_ERR:
      return absl::InternalError(absl::StrCat(
          what, ": a local buffer or queue-pair error (a bug in rdmaflow)"));
    default:
      return absl::InternalError(what);
  }
}

}  // namespace rdmaflow::rdma::ibverbs
