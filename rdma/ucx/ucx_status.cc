#include "rdma/ucx/ucx_status.h"

#include "absl/strings/str_cat.h"

namespace rdmaflow::rdma::ucx {

absl::Status UcsToStatus(ucs_status_t status, absl::string_view what) {
  if (status == UCS_OK) return absl::OkStatus();
  const std::string message =
      absl::StrCat(what, ": ", ucs_status_string(status));
  switch (status) {
    case UCS_ERR_CANCELED:
      return absl::CancelledError(message);
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT:
      return absl::ResourceExhaustedError(message);
    case UCS_ERR_NO_MEMORY:
      return absl::ResourceExhaustedError(
          absl::StrCat(message, " (check free memory and `ulimit -l`)"));
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_TIMED_OUT:
      return absl::UnavailableError(message);
    case UCS_ERR_NO_DEVICE:
    case UCS_ERR_NO_ELEM:
    case UCS_ERR_UNSUPPORTED:
      return absl::UnavailableError(absl::StrCat(
          message, " (check UCX_TLS / the `tls` parameter and `ucx_info -d`)"));
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
      return absl::InvalidArgumentError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace rdmaflow::rdma::ucx
