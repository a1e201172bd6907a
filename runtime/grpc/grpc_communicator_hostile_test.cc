// File: grpc_communicator_hostile_test.cc
// The gRPC baseline against a client that is not of the job, and one that
// sends more than any tensor of the plan: a stream without the job token's
// proof (or with another's) is refused before anything is read, and a
// message larger than the largest tensor the rank receives is refused by
// gRPC; the job's own tensors still arrive.
#include <memory>
#include <string>
#include <vector>

#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "graph_analyzer/examples/example_graphs.h"
#include "graph_analyzer/planner.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "rdma/job_token.h"
#include "rdma/rendezvous.h"
#include "rdma/testing/rank_threads.h"
#include "runtime/grpc/grpc_communicator.h"
#include "runtime/replay.h"
#include "runtime/tensor_message.grpc.pb.h"

namespace rdmaflow::runtime {
namespace {

constexpr char kNs[] = "grpc_hostile";

// One Push stream to `address` carrying `proof` (none when empty) and one
// message with `data_bytes` of data; returns how gRPC ended the stream.
grpc::Status PushOnce(const std::string& address, const std::string& proof,
                      size_t data_bytes) {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  auto stub = TensorService::NewStub(channel);
  grpc::ClientContext context;
  if (!proof.empty()) context.AddMetadata("x-rdmaflow-proof", proof);
  StreamAck ack;
  std::unique_ptr<grpc::ClientWriter<TensorChunk>> writer = stub->Push(&context, &ack);
  TensorChunk message;
  message.set_id(12345);  // no transfer of the plan: refused if ever read
  message.set_data(std::string(data_bytes, 'x'));
  writer->Write(message);
  writer->WritesDone();
  return writer->Finish();
}

TEST(GrpcCommunicatorHostileTest, StrangersAndOversizedMessagesAreRefused) {
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan plan,
                       graph::PlanGraph(graph::examples::MlpTwoRanks(), {}));
  uint64_t largest = 0;
  for (const auto& link : plan.link()) {
    for (const auto& slot : link.slot()) largest = std::max<uint64_t>(largest, slot.bytes());
  }
  ASSERT_GT(largest, 0u);
  grpc::Status no_proof, wrong_proof, oversized;
  std::vector<absl::Status> results = rdma::testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& /*transport*/, rdma::Store& store) -> absl::Status {
        CommunicatorOptions options;
        options.ns = kNs;
        options.trace_steps = 0;
        ASSIGN_OR_RETURN(auto communicator, CreateGrpcCommunicator(plan, rank, store, options));
        if (rank == 0) {
          ASSIGN_OR_RETURN(std::string address,
                           rdma::FetchProven(store, kNs, "grpc/address/1", absl::Seconds(30)));
          no_proof = PushOnce(address, "", 8);
          ASSIGN_OR_RETURN(std::string other,
                           rdma::JobTokenProof("another-job", "rdmaflow-grpc-stream-v1"));
          wrong_proof = PushOnce(address, other, 8);
          // The job's own proof, as a peer of the job computes it.
          ASSIGN_OR_RETURN(rdma::JobToken token, rdma::JobTokenFromEnvironment());
          ASSIGN_OR_RETURN(std::string ours,
                           rdma::JobTokenProof(token.value,
                                               absl::StrCat("rdmaflow-grpc-stream-v1/",
                                                            std::string(kNs).size(), ":", kNs,
                                                            "/1")));
          oversized = PushOnce(address, ours, largest + (1 << 20));
        }
        // The job's own tensors still move.
        ReplayOptions replay;
        ASSIGN_OR_RETURN(auto replayer, Replayer::Create(plan, rank, replay));
        RETURN_IF_ERROR(replayer->RunStep(*communicator, 0).status());
        return communicator->Shutdown();
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
  EXPECT_EQ(no_proof.error_code(), grpc::StatusCode::PERMISSION_DENIED) << no_proof.error_message();
  EXPECT_EQ(wrong_proof.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << wrong_proof.error_message();
  EXPECT_EQ(oversized.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << oversized.error_message();
}

}  // namespace
}  // namespace rdmaflow::runtime
