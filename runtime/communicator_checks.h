// File: communicator_checks.h
// -----------------------------------------------------------------------------
// The checks every Communicator (the zero-copy executor, rdma_copy, grpc)
// runs on what it is handed, in one place, so that the three refuse the same
// calls with the same codes and messages (the error list in communicator.h):
//   - a call after Shutdown(): CheckNotShutDown;
//   - Send()'s id and tensor: CheckSendArguments;
//   - Recv()'s and Ready()'s id: RankPlan::FindRecv (rank_plan.h);
//   - a tensor a peer's message announces (the baselines, which carry shape
//     and size on the wire): CheckArrivedTensor.
// The once-per-step rule is StepTracker's (step_tracker.h), and the checks of
// what a peer wrote into our memory stay with the protocol that reads it.
#ifndef RDMAFLOW_RUNTIME_COMMUNICATOR_CHECKS_H_
#define RDMAFLOW_RUNTIME_COMMUNICATOR_CHECKS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "runtime/communicator.h"
#include "runtime/rank_plan.h"

namespace rdmaflow::runtime {

// kFailedPrecondition, naming `rank`, once the communicator was shut down
// (or its set-up failed): it moves nothing more.
absl::Status CheckNotShutDown(bool shut_down, int rank);

// What Send() may move: the transfer and the tensor's byte count.
struct SendArguments {
  const TransferInfo* info = nullptr;
  uint64_t bytes = 0;
};

// Send(id, tensor)'s arguments against `plan`. kInvalidArgument (naming the
// tensor, its id and the peer) for an id the plan lacks or this rank does
// not send (saying who does), a shape the plan does not allow, `bytes`
// other than the shape's, no data for a non-empty tensor, or a dynamic
// tensor larger than `dynamic_pool_bytes` (which no receiver could hold).
absl::StatusOr<SendArguments> CheckSendArguments(const RankPlan& plan, int id,
                                                 const OutgoingTensor& tensor,
                                                 size_t dynamic_pool_bytes);

// A tensor of transfer `info` that `peer`'s message announces with `shape`
// and `total_bytes`: its bytes, or kDataLoss naming the peer for a shape the
// plan does not allow, a size other than the shape's, or a dynamic tensor
// larger than `dynamic_pool_bytes` (it would not fit anywhere: the sender's
// CheckSendArguments refuses it).
absl::StatusOr<uint64_t> CheckArrivedTensor(const TransferInfo& info, int peer,
                                            absl::Span<const int64_t> shape,
                                            uint64_t total_bytes,
                                            size_t dynamic_pool_bytes);

}  // namespace rdmaflow::runtime

#endif  // RDMAFLOW_RUNTIME_COMMUNICATOR_CHECKS_H_
