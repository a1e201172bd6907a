// File: grpc_communicator.cc
#include "runtime/grpc/grpc_communicator.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "rdma/job_token.h"
#include "rdma/rendezvous.h"
#include "grpcpp/grpcpp.h"
#include "runtime/communicator_checks.h"
#include "runtime/rank_plan.h"
#include "runtime/step_tracker.h"
#include "runtime/tensor_message.grpc.pb.h"
#include "runtime/tensor_message.pb.h"

namespace rdmaflow::runtime {
namespace {

std::string AddressKey(int rank) { return absl::StrCat("grpc/address/", rank); }

// The metadata a stream into a rank's server carries: a proof of the job
// token for that rank (rdma/job_token.h). It travels in the clear, as the
// ibverbs handshake's token does: it keeps other jobs and scanners out, not
// someone who can read the network (docs/security.md).
constexpr char kProofMetadata[] = "x-rdmaflow-proof";

absl::StatusOr<std::string> StreamProof(const std::string& ns, int server_rank) {
  ASSIGN_OR_RETURN(rdma::JobToken token, rdma::JobTokenFromEnvironment());
  return rdma::JobTokenProof(token.value,
                             absl::StrCat("rdmaflow-grpc-stream-v1/", ns.size(), ":", ns, "/",
                                          server_rank));
}

// Room in a gRPC message beside the tensor's bytes (id, step, shape,
// sizes): far more than the fields take.
constexpr uint64_t kMessageOverhead = 64 << 10;

// The parsed message owns the bytes the caller sees.
class MessageLease final : public ReceivedTensor::Lease {
 public:
  explicit MessageLease(std::unique_ptr<TensorChunk> message)
      : message_(std::move(message)) {}

 private:
  std::unique_ptr<TensorChunk> message_;
};

// Server side: parsed tensors, queued per id. Thread-safe (gRPC handler
// threads produce, the communicator's thread consumes).
class Inbox final : public TensorService::Service {
 public:
  Inbox(const RankPlan* plan, int queue_depth)
      : plan_(plan), queue_depth_(queue_depth) {}

  // Before the server starts: what a stream must present.
  void set_expected_proof(std::string proof) { expected_proof_ = std::move(proof); }

  grpc::Status Push(grpc::ServerContext* context,
                    grpc::ServerReader<TensorChunk>* reader,
                    StreamAck* /*ack*/) override {
    // A client that is not of this job: refused before it is read.
    const auto& metadata = context->client_metadata();
    const auto proof = metadata.find(kProofMetadata);
    if (proof == metadata.end() ||
        !rdma::JobTokenMatches(expected_proof_,
                               absl::string_view(proof->second.data(), proof->second.size()))) {
      std::fprintf(stderr,
                   "rdmaflow: rank %d refused a gRPC stream from %s without this job's "
                   "token (another job, or a different RDMAFLOW_JOB_TOKEN)\n",
                   plan_->rank(), context->peer().c_str());
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          "no proof of this job's token (RDMAFLOW_JOB_TOKEN)");
    }
    while (true) {
      auto message = std::make_unique<TensorChunk>();
      if (!reader->Read(message.get())) return grpc::Status::OK;
      absl::StatusOr<const TransferInfo*> info = plan_->FindRecv(message->id());
      if (!info.ok()) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            std::string(info.status().message()));
      }
      absl::MutexLock lock(&mu_);
      std::deque<std::unique_ptr<TensorChunk>>& queue = queues_[message->id()];
      auto has_room = [&] {
        mu_.AssertHeld();  // Await() calls it under mu_
        return static_cast<int>(queue.size()) < queue_depth_ || closed_;
      };
      mu_.Await(absl::Condition(&has_room));
      if (closed_) return grpc::Status::CANCELLED;
      queue.push_back(std::move(message));
    }
  }

  // The oldest tensor of `id`, waiting up to `timeout`.
  std::unique_ptr<TensorChunk> Pop(int id, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    std::deque<std::unique_ptr<TensorChunk>>& queue = queues_[id];
    auto ready = [&] { return !queue.empty(); };
    if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) return nullptr;
    std::unique_ptr<TensorChunk> message = std::move(queue.front());
    queue.pop_front();
    return message;
  }

  // Whether a tensor of `id` is queued.
  bool Has(int id) {
    absl::MutexLock lock(&mu_);
    return !queues_[id].empty();
  }

  void Close() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }

 private:
  const RankPlan* plan_;
  const int queue_depth_;
  std::string expected_proof_;  // set before the server starts, then read-only
  absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::map<int, std::deque<std::unique_ptr<TensorChunk>>> queues_
      ABSL_GUARDED_BY(mu_);
};

// Thread-compatible (see Communicator).
class GrpcCommunicator final : public Communicator {
 public:
  GrpcCommunicator(RankPlan plan, rdma::Store& store,
                   const CommunicatorOptions& options,
                   const GrpcOptions& grpc_options)
      : plan_(std::move(plan)),
        store_(store),
        options_(options),
        grpc_options_(grpc_options),
        inbox_(&plan_, grpc_options.queue_depth),
        steps_(&plan_, options.lockstep) {}

  ~GrpcCommunicator() override {
    absl::Status status = Shutdown();
    if (!status.ok()) {
      std::fprintf(stderr, "rdmaflow: rank %d: grpc shutdown: %s\n",
                   plan_.rank(), status.ToString().c_str());
    }
    inbox_.Close();
    if (server_ != nullptr) server_->Shutdown(gpr_now(GPR_CLOCK_REALTIME));
  }

  absl::Status SetUp() {
    absl::Status status = StartServerAndStreams();
    // Half set up: no barrier the peers would meet (the caller gets the
    // error; the destructor has nothing to report).
    if (!status.ok()) shut_down_ = true;
    return status;
  }

  absl::Status StartServerAndStreams() {
    std::set<int> senders, receivers;
    for (const TransferInfo& info : plan_.recvs()) senders.insert(info.src_rank);
    for (const TransferInfo& info : plan_.sends()) receivers.insert(info.dst_rank);
    // No message larger than the largest tensor this rank receives (a
    // dynamic one fits dynamic_pool_bytes): a peer cannot make gRPC
    // buffer more.
    uint64_t largest = 0;
    for (const TransferInfo& info : plan_.recvs()) {
      largest = std::max<uint64_t>(
          largest, info.dynamic ? options_.dynamic_pool_bytes : info.data_bytes);
    }
    const int max_message = static_cast<int>(std::min<uint64_t>(
        largest + kMessageOverhead, std::numeric_limits<int>::max()));
    ASSIGN_OR_RETURN(std::string expected, StreamProof(options_.ns, plan_.rank()));
    inbox_.set_expected_proof(std::move(expected));
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat(grpc_options_.host, ":0"),
                             grpc::InsecureServerCredentials(), &port);
    builder.SetMaxReceiveMessageSize(max_message);
    builder.RegisterService(&inbox_);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port == 0) {
      return absl::UnavailableError(absl::StrCat(
          "rank ", plan_.rank(), " cannot start its gRPC server on ",
          grpc_options_.host, ": is the address local to this host?"));
    }
    // Proven like every address in the store: a store writer cannot
    // redirect our tensors to a server of its choosing.
    RETURN_IF_ERROR(rdma::PublishProven(store_, options_.ns, AddressKey(plan_.rank()),
                                        absl::StrCat(grpc_options_.host, ":", port)));
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(-1);
    args.SetMaxReceiveMessageSize(kMessageOverhead);  // acks only
    for (int dst : receivers) {
      ASSIGN_OR_RETURN(std::string address, rdma::FetchProven(store_, options_.ns,
                                                              AddressKey(dst),
                                                              options_.timeout));
      ASSIGN_OR_RETURN(std::string proof, StreamProof(options_.ns, dst));
      Stream& stream = streams_[dst];
      stream.channel = grpc::CreateCustomChannel(
          address, grpc::InsecureChannelCredentials(), args);
      stream.stub = TensorService::NewStub(stream.channel);
      stream.context = std::make_unique<grpc::ClientContext>();
      stream.context->AddMetadata(kProofMetadata, proof);
      stream.writer = stream.stub->Push(stream.context.get(), &stream.ack);
    }
    return absl::OkStatus();
  }

  std::string name() const override { return "grpc"; }

  absl::Status Send(int id, OutgoingTensor tensor) override {
    RETURN_IF_ERROR(CheckUsable());
    ASSIGN_OR_RETURN(SendArguments args,
                     CheckSendArguments(plan_, id, tensor, options_.dynamic_pool_bytes));
    const TransferInfo* info = args.info;
    const uint64_t bytes = args.bytes;
    RETURN_IF_ERROR(steps_.CheckSend(*info));
    TensorChunk message;
    message.set_id(id);
    message.set_step(steps_.SendSequence(*info));
    for (int64_t d : tensor.shape) message.add_shape(d);
    message.set_total_bytes(bytes);
    message.set_chunk_bytes(bytes);
    message.set_data(reinterpret_cast<const char*>(tensor.data), bytes);
    Stream& stream = streams_.at(info->dst_rank);
    if (!stream.writer->Write(message)) {
      return absl::UnavailableError(absl::StrCat(
          "the gRPC stream to rank ", info->dst_rank, " broke while sending ",
          info->Describe(), ": is the peer still running?"));
    }
    steps_.Sent(*info);
    ++counters_.tensors_sent;
    counters_.bytes_sent += bytes;
    // Into the message, then gRPC's serialization into its buffers.
    counters_.copies += 2;
    counters_.bytes_copied += 2 * bytes;
    return absl::OkStatus();
  }

  absl::StatusOr<ReceivedTensor> Recv(int id) override {
    RETURN_IF_ERROR(CheckUsable());
    ASSIGN_OR_RETURN(const TransferInfo* info, plan_.FindRecv(id));
    RETURN_IF_ERROR(steps_.CheckRecv(*info));
    const absl::Time begin = absl::Now();
    std::unique_ptr<TensorChunk> message = inbox_.Pop(id, options_.timeout);
    counters_.recv_wait += absl::Now() - begin;
    if (message == nullptr) {
      return absl::DeadlineExceededError(absl::StrCat(
          "rank ", plan_.rank(), " timed out after ",
          absl::FormatDuration(options_.timeout), ": rank ", info->src_rank,
          " has not delivered step ", steps_.step(), " of ",
          info->Describe()));
    }
    std::vector<int64_t> shape(message->shape().begin(), message->shape().end());
    ASSIGN_OR_RETURN(uint64_t bytes,
                     CheckArrivedTensor(*info, info->src_rank, shape, message->data().size(),
                                        options_.dynamic_pool_bytes));
    if (message->step() != steps_.RecvSequence(*info)) {
      return absl::DataLossError(absl::StrCat(
          info->Describe(), ": tensor ", message->step(), " arrived as tensor ",
          steps_.RecvSequence(*info), " (step ", steps_.step(), ")"));
    }
    steps_.Received(*info);
    ++counters_.tensors_received;
    counters_.bytes_received += bytes;
    ++counters_.copies;  // parsing the message out of gRPC's buffers
    counters_.bytes_copied += bytes;
    std::byte* data = reinterpret_cast<std::byte*>(message->mutable_data()->data());
    return ReceivedTensor(data, bytes, std::move(shape),
                          std::make_unique<MessageLease>(std::move(message)));
  }

  // Send() serializes every tensor: nothing reads it after.
  absl::Status WaitSendsDone() override { return CheckUsable(); }

  absl::StatusOr<bool> Ready(int id) override {
    RETURN_IF_ERROR(CheckUsable());
    ASSIGN_OR_RETURN(const TransferInfo* info, plan_.FindRecv(id));
    RETURN_IF_ERROR(steps_.CheckRecv(*info));
    return inbox_.Has(id);
  }

  absl::Status FinishStep() override {
    RETURN_IF_ERROR(CheckUsable());
    RETURN_IF_ERROR(steps_.FinishStep());
    ++counters_.steps;
    return absl::OkStatus();
  }

  absl::Status Shutdown() override {
    if (shut_down_) return shutdown_status_;
    shut_down_ = true;
    absl::Status status;
    for (auto& [dst, stream] : streams_) {
      stream.writer->WritesDone();
      grpc::Status finished = stream.writer->Finish();
      if (!finished.ok() && status.ok()) {
        status = absl::UnavailableError(absl::StrCat(
            "closing the gRPC stream to rank ", dst, ": ",
            finished.error_message()));
      }
    }
    // Every stream into this rank is finished once every rank is here.
    if (status.ok()) {
      status = rdma::Barrier(store_, options_.ns, "grpc/shutdown",
                             plan_.world_size(), options_.timeout);
    }
    shutdown_status_ = status;
    return status;
  }

  TransferCounters counters() const override { return counters_; }

 private:
  struct Stream {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<TensorService::Stub> stub;
    std::unique_ptr<grpc::ClientContext> context;
    StreamAck ack;
    std::unique_ptr<grpc::ClientWriter<TensorChunk>> writer;
  };

  absl::Status CheckUsable() const { return CheckNotShutDown(shut_down_, plan_.rank()); }

  RankPlan plan_;
  rdma::Store& store_;
  const CommunicatorOptions options_;
  const GrpcOptions grpc_options_;
  Inbox inbox_;
  std::unique_ptr<grpc::Server> server_;
  std::map<int, Stream> streams_;
  StepTracker steps_;
  bool shut_down_ = false;
  absl::Status shutdown_status_;
  TransferCounters counters_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateGrpcCommunicator(
    const plan::TransferPlan& plan, int rank, rdma::Store& store,
    const CommunicatorOptions& options, const GrpcOptions& grpc_options) {
  if (grpc_options.queue_depth < 1) {
    return absl::InvalidArgumentError("grpc queue_depth must be at least 1");
  }
  ASSIGN_OR_RETURN(RankPlan rank_plan, RankPlan::Create(plan, rank));
  RETURN_IF_ERROR(CheckHostMemoryOnly(rank_plan, "the gRPC communicator"));
  auto communicator = std::make_unique<GrpcCommunicator>(
      std::move(rank_plan), store, options, grpc_options);
  RETURN_IF_ERROR(communicator->SetUp());
  return communicator;
}

}  // namespace rdmaflow::runtime
