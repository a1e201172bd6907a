// File: ucx_status.h
// -----------------------------------------------------------------------------
// The one place where UCX's ucs_status_t becomes an absl::Status.
#ifndef RDMAFLOW_RDMA_UCX_UCX_STATUS_H_
#define RDMAFLOW_RDMA_UCX_UCX_STATUS_H_

#include <ucs/type/status.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace rdmaflow::rdma::ucx {

// Maps `status` to an absl code (docs/rdma.md, "Error codes") with the message
// "<what>: <UCX's description>". UCS_OK maps to OkStatus().
absl::Status UcsToStatus(ucs_status_t status, absl::string_view what);

}  // namespace rdmaflow::rdma::ucx

#endif  // RDMAFLOW_RDMA_UCX_UCX_STATUS_H_
