// File: communicator_factory.cc
#include "runtime/communicator_factory.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/executor.h"
#include "runtime/grpc/grpc_communicator.h"
#include "runtime/rdma_copy_communicator.h"

namespace rdmaflow::runtime {

std::vector<std::string> CommunicatorNames() {
  return {"rdma", "rdma_copy", "grpc"};
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(
    const std::string& name, const plan::TransferPlan& plan,
    rdma::Transport& transport, rdma::Store& store,
    const CommunicatorOptions& options) {
  if (name == "rdma") {
    absl::StatusOr<std::unique_ptr<Executor>> executor =
        Executor::Create(plan, transport, store, options);
    if (!executor.ok()) return executor.status();
    return std::unique_ptr<Communicator>(std::move(*executor));
  }
  if (name == "rdma_copy") {
    absl::StatusOr<std::unique_ptr<RdmaCopyCommunicator>> communicator =
        RdmaCopyCommunicator::Create(plan, transport, store, options);
    if (!communicator.ok()) return communicator.status();
    return std::unique_ptr<Communicator>(std::move(*communicator));
  }
  if (name == "grpc") {
    return CreateGrpcCommunicator(plan, transport.rank(), store, options);
  }
  return absl::NotFoundError(absl::StrCat(
      "unknown communicator '", name, "'; choose one of: ",
      absl::StrJoin(CommunicatorNames(), ", ")));
}

}  // namespace rdmaflow::runtime
