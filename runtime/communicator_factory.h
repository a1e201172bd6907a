// File: communicator_factory.h
// -----------------------------------------------------------------------------
// One flag picks the communicator: "rdma" (zero copy, executor.h),
// "rdma_copy" (two-sided messages with copies, rdma_copy_communicator.h) or
// "grpc" (protobuf over gRPC, grpc/grpc_communicator.h). The ablation tool,
// the training harness and the tests create them here.
#ifndef RDMAFLOW_RUNTIME_COMMUNICATOR_FACTORY_H_
#define RDMAFLOW_RUNTIME_COMMUNICATOR_FACTORY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph_analyzer/plan.pb.h"
#include "rdma/store.h"
#include "rdma/transport.h"
#include "runtime/communicator.h"
#include "runtime/communicator_options.h"

namespace rdmaflow::runtime {

// "rdma", "rdma_copy", "grpc".
std::vector<std::string> CommunicatorNames();

// Creates communicator `name` for `transport.rank()` (collective). The grpc
// baseline does not use `transport` beyond its rank. kNotFound listing the
// names for an unknown one; otherwise the communicator's own errors.
absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(
    const std::string& name, const plan::TransferPlan& plan,
    rdma::Transport& transport, rdma::Store& store,
    const CommunicatorOptions& options);

}  // namespace rdmaflow::runtime

#endif  // RDMAFLOW_RUNTIME_COMMUNICATOR_FACTORY_H_
