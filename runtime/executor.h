// File: executor.h
// -----------------------------------------------------------------------------
// Executor: the zero-copy Communicator ("rdma"). It executes a TransferPlan
// over an rdma::Transport:
//   - set-up: allocates every receive region of the rank through
//     Transport::Allocate, publishes the descriptors on its links, one
//     scope per transfer link with the plan's layout of it, and fetches the
//     peers' (link_records.h);
//   - static tensors: Send writes the tensor straight into its slot on the
//     receiver with a notification; Recv returns a view of the slot (no
//     copy), released to the sender when dropped;
//   - dynamic tensors: Send publishes (sequence, bytes, source, shape) into
//     the metadata slot; the receiver pulls the bytes with a one-sided read
//     into its registered pool and releases the source;
//   - flow control: the receiver writes each slot's released count back into
//     the sender's credit region (one-sided); the sender never writes a
//     stage, or memory shared with another slot, that is still held;
//   - dynamic tracing: after `trace_steps` steps every rank re-plans with the
//     shapes it saw (graph_analyzer/tracing.h) and stable dynamic tensors move
//     to static slots.
// Every word a peer writes into our memory (metadata, credits, notification
// values) is checked before it sizes, offsets or releases anything
// (internal/slot_state.h); a forged one fails the executor with kDataLoss.
// A receive that gives up on a one-sided read (timeout, error) first closes
// the link to the sender, which cancels the read, and frees the read's
// destination only once its completion has fired; a completion that never
// fires keeps the destination allocated (logged), never reused.
// See docs/runtime.md for the protocol in full.
//
//   ASSIGN_OR_RETURN(auto executor,
//                    Executor::Create(plan, *transport, *store, {}));
//   RETURN_IF_ERROR(executor->Send(id, {data, bytes, shape, keepalive}));
//   ASSIGN_OR_RETURN(ReceivedTensor t, executor->Recv(other_id));
//   RETURN_IF_ERROR(executor->FinishStep());
#ifndef RDMAFLOW_RUNTIME_EXECUTOR_H_
#define RDMAFLOW_RUNTIME_EXECUTOR_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "graph_analyzer/plan.pb.h"
#include "rdma/endpoint.h"
#include "rdma/memory_region.h"
#include "rdma/store.h"
#include "rdma/transport.h"
#include "runtime/communicator.h"
#include "runtime/communicator_options.h"
#include "runtime/counters.h"
#include "runtime/internal/slot_state.h"
#include "runtime/pool_allocator.h"
#include "runtime/progress_engine.h"
#include "runtime/rank_plan.h"
#include "runtime/trace_recorder.h"

namespace rdmaflow::runtime {

// Thread-compatible (see Communicator); the calls drive the transport's
// progress, so `transport` must not be progressed by anyone else meanwhile.
// `transport` and `store` must outlive the executor.
class Executor final : public Communicator {
 public:
  // Sets the rank's part of `plan` up (collective: every rank of the plan
  // creates its executor with the same plan and namespace). Errors:
  // RankPlan::Create's, Allocate's (kResourceExhausted), kDeadlineExceeded
  // when a peer does not publish within the timeout.
  static absl::StatusOr<std::unique_ptr<Executor>> Create(
      const plan::TransferPlan& plan, rdma::Transport& transport,
      rdma::Store& store, const CommunicatorOptions& options);
  ~Executor() override;

  std::string name() const override { return "rdma"; }
  absl::Status Send(int id, OutgoingTensor tensor) override;
  absl::StatusOr<ReceivedTensor> Recv(int id) override;
  absl::StatusOr<bool> Ready(int id) override;
  absl::Status FinishStep() override;
  absl::Status Shutdown() override;
  TransferCounters counters() const override { return counters_; }

  // Registered memory (from `transport`) that Send may transfer from in
  // place: a tensor lying wholly inside it is written without staging. Must
  // outlive the executor. Used by runtime/torch's registered allocator.
  void AddSendArena(const rdma::MemoryRegion* region) override;
  bool SendsInPlace() const override { return true; }
  // Waits for the writes that read a caller's memory in place (and the
  // writes deferred behind held memory).
  absl::Status WaitSendsDone() override;

  // The plan being executed: the one given, or its re-planned successor.
  const plan::TransferPlan& plan() const { return rank_plan_.plan(); }
  // Tensors ("node:k") dynamic tracing moved to static slots.
  std::vector<std::string> promoted() const;
  const TraceRecorder& trace() const { return trace_; }

 private:
  Executor(RankPlan rank_plan, rdma::Transport& transport, rdma::Store& store,
           const CommunicatorOptions& options);

  // executor_setup.cc
  absl::Status SetUpGeneration();
  absl::Status SetUpPools();
  absl::Status Replan();

  // executor_progress.cc: the executor's share of each progress round.
  void OnNotification(const rdma::Notification& notification);
  void OnRound();
  void ProcessDrops(internal::RecvSlot& slot);
  // Posts each receive link's released counts in one write (at most one
  // in flight per link).
  void PostCredits();
  bool CreditsPending() const;
  // Waits until every operation this rank posted has completed.
  absl::Status Drain();

  // executor.cc
  // Flow control: the stage `seq` uses is released, and so is every slot
  // whose memory this one shares.
  bool StageFree(const internal::SendSlot& slot, uint64_t seq) const;
  bool SharedMemoryFree(const internal::SendSlot& slot, uint64_t seq) const;
  std::string BlockerOf(const internal::SendSlot& slot, uint64_t seq) const;
  // Posts `write` now, or leaves it for the progress engine while memory it
  // shares is held.
  absl::Status PostOrDefer(internal::SendSlot& slot,
                           internal::SendSlot::PendingWrite write);
  void PostDeferred();
  absl::StatusOr<rdma::LocalSlice> SourceOf(internal::SendSlot& slot,
                                            const OutgoingTensor& tensor,
                                            int stage);
  void FreeSources(internal::SendSlot& slot);
  absl::Status WaitForSlot(internal::SendSlot& slot, uint64_t seq);
  absl::Status SendStatic(internal::SendSlot& slot, OutgoingTensor tensor);
  absl::Status SendDynamic(internal::SendSlot& slot, OutgoingTensor tensor);
  absl::StatusOr<ReceivedTensor> RecvDynamic(
      const std::shared_ptr<internal::RecvSlot>& slot, int stage);
  // Checks the credit word of `slot` and, if valid, makes it the one flow
  // control uses; else fails the executor (kDataLoss) and returns that.
  absl::Status RefreshCredit(internal::SendSlot& slot);
  struct PendingRead;
  // Gives up on `read` after `why`: fails the executor, closes the link to
  // `peer` (cancelling the read) and waits, briefly, for its completion;
  // the destination is freed then, or by the completion when it fires.
  void AbandonRead(const std::shared_ptr<PendingRead>& read, int peer,
                   const absl::Status& why);
  absl::Status CheckUsable() const;
  absl::Status CheckSequence(uint64_t next_seq, const TransferInfo& info,
                             const char* verb) const;
  void Observe(const TransferInfo& info, const std::vector<int64_t>& shape);

  RankPlan rank_plan_;
  rdma::Transport& transport_;
  const CommunicatorOptions options_;

  // Per generation of the plan (a re-plan starts a new one).
  int generation_ = 0;
  int64_t generation_start_step_ = 0;
  std::vector<std::shared_ptr<rdma::MemoryRegion>> recv_regions_;
  // Our credit regions (one per send link) and the peers' descriptors we
  // fetched, of every generation (stable addresses).
  std::vector<std::unique_ptr<rdma::MemoryRegion>> credit_regions_;
  std::vector<std::unique_ptr<rdma::RemoteRegion>> remote_regions_;
  // Our credit words (per receive link, its slots' words in slot order)
  // and the writer that returns each receive link's credits (by link
  // index; null for links we do not receive on).
  std::unique_ptr<rdma::MemoryRegion> credit_out_;
  std::vector<std::unique_ptr<onesided::CreditWriter>> credit_writers_;
  std::unique_ptr<rdma::MemoryRegion> meta_out_;    // dynamic metadata staging
  std::vector<std::unique_ptr<internal::SendSlot>> sends_;
  std::vector<std::shared_ptr<internal::RecvSlot>> recvs_;
  std::vector<int> send_by_id_;
  std::vector<int> recv_by_id_;
  // (peer rank, slot index) -> index in recvs_, per peer rank.
  std::vector<std::vector<int>> recv_by_notification_;
  // Slots of earlier generations still referenced by leases.
  std::vector<std::shared_ptr<internal::RecvSlot>> retired_;

  // Dynamic tensors: our sources (read by receivers), their descriptors by
  // peer, and our destinations.
  std::unique_ptr<rdma::MemoryRegion> source_pool_region_;
  std::unique_ptr<PoolAllocator> source_pool_;
  std::vector<std::unique_ptr<rdma::RemoteRegion>> peer_source_pools_;
  std::shared_ptr<rdma::MemoryRegion> dest_pool_region_;
  std::unique_ptr<PoolAllocator> dest_pool_;

  std::vector<const rdma::MemoryRegion*> send_arenas_;
  std::shared_ptr<std::atomic<int>> dirty_;
  std::vector<internal::SendSlot*> deferred_;
  // Static writes from a caller's memory, posted or deferred, not yet
  // complete (WaitSendsDone).
  int64_t in_place_sends_ = 0;
  int64_t step_ = 0;
  bool shut_down_ = false;
  absl::Status shutdown_status_;
  // Shapes of dynamic tensors over the traced steps, by tensor name.
  std::vector<std::pair<std::string, std::vector<std::vector<int64_t>>>>
      observed_;
  std::vector<std::string> promoted_;
  TransferCounters counters_;
  TraceRecorder trace_;
  // Completion callbacks that may outlive the executor (abandoned reads,
  // writes and credit writes the engine's fence gave up on) hold a
  // weak_ptr to this and touch the executor only while it lives.
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
  // Last: destroyed first, collecting completions while the state their
  // callbacks touch still exists.
  ProgressEngine engine_;
};

}  // namespace rdmaflow::runtime

#endif  // RDMAFLOW_RUNTIME_EXECUTOR_H_
