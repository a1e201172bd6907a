// File: rdma_copy_communicator.h
// -----------------------------------------------------------------------------
// RdmaCopyCommunicator ("rdma_copy"): the "RPC optimized for RDMA" baseline.
// Two-sided messages over the same fabric and Transport as the zero-copy
// executor, as RDMA RPC systems build them: each directed link has a ring of
// fixed-size message buffers on the receiver; the sender serializes a
// header (tensor_message.proto) and copies the tensor, chunk by chunk, into a
// registered bounce buffer and writes it into the next ring slot with a
// notification; the receiver parses it, copies the bytes out into a fresh
// tensor and returns the ring slot with a one-sided credit write. One copy
// on each side, a header to encode and decode, and no knowledge of the plan
// beyond who talks to whom.
#ifndef RDMAFLOW_RUNTIME_RDMA_COPY_COMMUNICATOR_H_
#define RDMAFLOW_RUNTIME_RDMA_COPY_COMMUNICATOR_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph_analyzer/plan.pb.h"
#include "onesided/slots/credit_writer.h"
#include "rdma/memory_region.h"
#include "rdma/remote_region.h"
#include "rdma/store.h"
#include "rdma/transport.h"
#include "runtime/communicator.h"
#include "runtime/communicator_options.h"
#include "runtime/progress_engine.h"
#include "runtime/rank_plan.h"
#include "runtime/step_tracker.h"

namespace rdmaflow::runtime {

struct RdmaCopyOptions {
  // Ring slots per link and payload bytes per slot (a tensor larger than a
  // slot travels as several messages).
  int ring_slots = 8;
  size_t chunk_bytes = size_t{1} << 20;
};

// Thread-compatible (see Communicator).
class RdmaCopyCommunicator final : public Communicator {
 public:
  // Collective, like Executor::Create.
  static absl::StatusOr<std::unique_ptr<RdmaCopyCommunicator>> Create(
      const plan::TransferPlan& plan, rdma::Transport& transport,
      rdma::Store& store, const CommunicatorOptions& options,
      const RdmaCopyOptions& copy_options = {});
  ~RdmaCopyCommunicator() override;

  std::string name() const override { return "rdma_copy"; }
  absl::Status Send(int id, OutgoingTensor tensor) override;
  absl::StatusOr<ReceivedTensor> Recv(int id) override;
  absl::StatusOr<bool> Ready(int id) override;
  // Send() copies every tensor into a message: nothing reads it after.
  absl::Status WaitSendsDone() override { return CheckUsable(); }
  absl::Status FinishStep() override;
  absl::Status Shutdown() override;
  TransferCounters counters() const override { return counters_; }

 private:
  struct Outgoing {  // towards one peer
    rdma::Endpoint* endpoint = nullptr;
    rdma::RemoteRegion ring;
    std::unique_ptr<rdma::MemoryRegion> bounce;
    std::vector<bool> bounce_busy;
    std::unique_ptr<rdma::MemoryRegion> credit;  // consumed count, theirs
    uint64_t credit_seen = 0;  // its last value that passed CheckCredit
    uint64_t next_message = 0;
  };
  struct Assembled {
    int64_t step;
    std::vector<int64_t> shape;
    std::shared_ptr<std::vector<std::byte>> bytes;
    uint64_t arrived = 0;  // bytes delivered so far, in order
  };
  struct Incoming {  // from one peer
    rdma::Endpoint* endpoint = nullptr;
    std::unique_ptr<rdma::MemoryRegion> ring;
    rdma::RemoteRegion credit;  // the sender's consumed count
    uint64_t consumed = 0;
    // Returns `consumed` to the sender (a word of credit_out_).
    std::unique_ptr<onesided::CreditWriter> credits;
    size_t credit_word = 0;  // in credit_out_
  };

  RdmaCopyCommunicator(RankPlan rank_plan, rdma::Transport& transport,
                       rdma::Store& store, const CommunicatorOptions& options,
                       const RdmaCopyOptions& copy_options);
  absl::Status SetUp();
  void OnNotification(const rdma::Notification& notification);
  absl::Status Deliver(int peer, const std::byte* message);
  void PostCredits();
  absl::Status CheckUsable() const;

  RankPlan rank_plan_;
  rdma::Transport& transport_;
  const CommunicatorOptions options_;
  const RdmaCopyOptions copy_options_;
  const size_t slot_bytes_;
  std::map<int, Outgoing> outgoing_;
  std::map<int, Incoming> incoming_;
  std::unique_ptr<rdma::MemoryRegion> credit_out_;
  // Per receive id: the tensor being assembled and those complete.
  std::map<int, Assembled> partial_;
  std::map<int, std::deque<Assembled>> ready_;
  StepTracker steps_;
  bool shut_down_ = false;
  absl::Status shutdown_status_;
  TransferCounters counters_;
  ProgressEngine engine_;  // last: destroyed first
};

}  // namespace rdmaflow::runtime

#endif  // RDMAFLOW_RUNTIME_RDMA_COPY_COMMUNICATOR_H_
