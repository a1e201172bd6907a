// File: grpc_communicator.h
// -----------------------------------------------------------------------------
// GrpcCommunicator ("grpc"): the baseline TensorFlow's default distributed
// runtime stands for. Each receiving rank runs a gRPC server; each sender
// keeps one client stream per destination and sends every tensor as one
// protobuf message (runtime/tensor_message.proto) over TCP: the tensor is
// copied into the message, serialized by gRPC, parsed on the receiver, and
// the parsed message's bytes are handed to the caller. No RDMA, no
// registered memory, no plan knowledge beyond who talks to whom.
#ifndef RDMAFLOW_RUNTIME_GRPC_GRPC_COMMUNICATOR_H_
#define RDMAFLOW_RUNTIME_GRPC_GRPC_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "graph_analyzer/plan.pb.h"
#include "rdma/store.h"
#include "runtime/communicator.h"
#include "runtime/communicator_options.h"

namespace rdmaflow::runtime {

struct GrpcOptions {
  // The address peers reach this rank's server at (the port is chosen by
  // the system and published through the Store).
  std::string host = "127.0.0.1";
  // Tensors of one id the server buffers before it stops reading the stream
  // (gRPC's flow control then holds the sender back).
  int queue_depth = 2;
};

// Creates the rank's communicator (collective, like Executor::Create; the
// rank is `rank`, the store carries the server addresses).
absl::StatusOr<std::unique_ptr<Communicator>> CreateGrpcCommunicator(
    const plan::TransferPlan& plan, int rank, rdma::Store& store,
    const CommunicatorOptions& options, const GrpcOptions& grpc_options = {});

}  // namespace rdmaflow::runtime

#endif  // RDMAFLOW_RUNTIME_GRPC_GRPC_COMMUNICATOR_H_
