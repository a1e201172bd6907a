// File: communicator_checks.cc
#include "runtime/communicator_checks.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph_analyzer/shape_util.h"

namespace rdmaflow::runtime {

absl::Status CheckNotShutDown(bool shut_down, int rank) {
  if (!shut_down) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "rank ", rank, ": the communicator was shut down (or its set-up failed); "
      "create a new one to move more tensors"));
}

absl::StatusOr<SendArguments> CheckSendArguments(const RankPlan& plan, int id,
                                                 const OutgoingTensor& tensor,
                                                 size_t dynamic_pool_bytes) {
  SendArguments args;
  ASSIGN_OR_RETURN(args.info, plan.FindSend(id));
  const TransferInfo& info = *args.info;
  ASSIGN_OR_RETURN(args.bytes, CheckShape(info, tensor.shape));
  if (args.bytes != tensor.bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        info.Describe(), ": got ", tensor.bytes, " bytes for shape ",
        graph::ShapeString(tensor.shape), " of ", graph::DataTypeName(info.spec.dtype()),
        ", which needs ", args.bytes));
  }
  if (args.bytes > 0 && tensor.data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(info.Describe(), ": null data for ", args.bytes, " bytes"));
  }
  if (info.dynamic && args.bytes > dynamic_pool_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        info.Describe(), ": ", args.bytes, " bytes exceed the dynamic pool of ",
        dynamic_pool_bytes, " bytes; raise CommunicatorOptions::dynamic_pool_bytes "
        "(--dynamic_pool_bytes)"));
  }
  return args;
}

absl::StatusOr<uint64_t> CheckArrivedTensor(const TransferInfo& info, int peer,
                                            absl::Span<const int64_t> shape,
                                            uint64_t total_bytes,
                                            size_t dynamic_pool_bytes) {
  absl::StatusOr<uint64_t> bytes = CheckShape(info, shape);
  if (!bytes.ok()) {
    return absl::DataLossError(absl::StrCat("rank ", peer, " sent ", bytes.status().message()));
  }
  if (*bytes != total_bytes) {
    return absl::DataLossError(absl::StrCat(info.Describe(), ": rank ", peer,
                                            " sent a message of ", total_bytes,
                                            " bytes for shape of ", *bytes));
  }
  if (info.dynamic && *bytes > dynamic_pool_bytes) {
    return absl::DataLossError(absl::StrCat(
        "rank ", peer, " sent ", info.Describe(), " of ", *bytes,
        " bytes, more than dynamic_pool_bytes (", dynamic_pool_bytes, ")"));
  }
  return *bytes;
}

}  // namespace rdmaflow::runtime
