// File: rdma_copy_communicator.h
// -----------------------------------------------------------------------------
// RdmaCopyCommunicator ("rdma_copy"): the "RPC optimized for RDMA" baseline.
// Two-sided messages over the same fabric and Transport as the zero-copy
// executor, as RDMA RPC systems build them: each peer pair has a slot link
// (onesided/slots/slot_link.h), with a ring of fixed-size message slots on
// the receiver for each direction the plan sends. The sender serializes a
// header (tensor_message.proto) and copies the tensor, chunk by chunk, into
// the link's registered staging slot and writes it into the receiver's
// slot, then the slot's flag; the receiver, polling the flag, parses the
// header, copies the bytes out into a fresh tensor and returns the slot with
// a one-sided credit write. One copy on each side, a header to encode and
// decode, and no knowledge of the plan beyond who talks to whom: the same
// messaging the Messenger does.
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
#include "onesided/slots/slot_link.h"
#include "onesided/slots/slot_ring.h"
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
  struct Assembled {
    int64_t step;
    std::vector<int64_t> shape;
    std::shared_ptr<std::vector<std::byte>> bytes;
    uint64_t arrived = 0;  // bytes delivered so far, in order
  };
  // The slot link to one peer: a ring of messages each way the plan sends.
  struct Peer {
    std::unique_ptr<onesided::SlotLink> link;
    onesided::SlotRingSender* sender = nullptr;      // null: we send it nothing
    onesided::SlotRingReceiver* receiver = nullptr;  // null: it sends us nothing
    int64_t in_flight() const { return link != nullptr ? link->in_flight() : 0; }
  };

  RdmaCopyCommunicator(RankPlan rank_plan, rdma::Transport& transport,
                       rdma::Store& store, const CommunicatorOptions& options,
                       const RdmaCopyOptions& copy_options);
  absl::Status SetUp();
  // Each progress round: posts what the senders queued, takes the messages
  // whose flags are up, returns their slots.
  void OnRound();
  void Receive(int peer, Peer& link);
  absl::Status Deliver(int peer, const std::byte* message);
  bool Idle() const;
  absl::Status CheckUsable() const;

  RankPlan rank_plan_;
  rdma::Transport& transport_;
  const CommunicatorOptions options_;
  const RdmaCopyOptions copy_options_;
  const size_t slot_bytes_;
  // By peer rank; cleared by the destructor before the engine (whose links
  // they are on) goes.
  std::map<int, Peer> peers_;
  // Per receive id: the tensor being assembled and those complete.
  std::map<int, Assembled> partial_;
  std::map<int, std::deque<Assembled>> ready_;
  StepTracker steps_;
  bool shut_down_ = false;
  // Set once drained for shutdown: no more credits (a peer past the
  // barrier may have freed its credit word).
  bool closing_ = false;
  bool barrier_passed_ = false;  // every peer is done with our memory
  absl::Status shutdown_status_;
  TransferCounters counters_;
  ProgressEngine engine_;  // last: destroyed first
};

}  // namespace rdmaflow::runtime

#endif  // RDMAFLOW_RUNTIME_RDMA_COPY_COMMUNICATOR_H_
