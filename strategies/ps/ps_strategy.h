// File: ps_strategy.h
// -----------------------------------------------------------------------------
// The parameter server strategy ("ps"). Servers (ranks 0..S-1) hold
// size-balanced shards of the parameters (sharding.h) in versioned buffers
// (onesided/versioned_buffer.h) and apply SGD with momentum; workers
//   1. wait for permission: read their bound from every server's clock
//      buffer (one-sided) until their clock is within it (sync_policy.h)
//      and the server has applied their own last gradient (read-my-writes);
//   2. pull each shard by one-sided READ straight into the memory the
//      model's parameters point at (no server CPU, no copy; device
//      parameters on another host are staged, answered by the server's
//      progress);
//   3. compute, with the gradients landing in registered memory;
//   4. push each shard's gradient into their own static slot on its server
//      (one-sided write through the free-running communicator, no copy).
// A server takes gradients as they come (Communicator::Ready): under bsp it
// sums the W of a step and applies their mean; otherwise it applies each
// gradient, scaled by 1/W, on arrival; then it republishes the clocks.
// With overlap=on (ps_options.h) each shard is cut into slices (slices.h):
// a worker pushes each slice from the communication thread as soon as
// backward completed its gradients (bucket_pipeline.h), a server applies
// each slice on its own (under bsp once every worker's slice of the step is
// in), publishing it in a versioned buffer of its own and, in its clock
// words, how many of each worker's gradients it holds; a worker pulls each
// slice of its next step as soon as that slice is ready for it, while the
// rest are still on the wire. What a pull sees is unchanged: under bsp each
// slice holds exactly the step's updates of every worker; otherwise the
// step is within the bound, and every slice holds the worker's own
// gradients (read-my-writes).
// With pull=send the server instead sends each worker its parameters when
// the worker may go on (an RPC parameter server's reply), so the strategy
// runs over every communicator, rdma_copy and grpc included.
// A peer slower than the timeout: a worker waiting for permission, or a
// server for a gradient, gets kDeadlineExceeded naming the workers (and
// ranks) it waits for; a pull whose read times out, kDeadlineExceeded naming
// the server (the read is cancelled first, so nothing lands in the
// parameters later). After any failed step the rank is unusable: Step()
// returns kFailedPrecondition quoting the failure, and Finish() waits for
// nobody's progress (only the communicator's shutdown, each of its waits
// bounded by the timeout) and returns the failure.
// See docs/strategies.md.
#ifndef RDMAFLOW_STRATEGIES_PS_PS_STRATEGY_H_
#define RDMAFLOW_STRATEGIES_PS_PS_STRATEGY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "c10/core/Device.h"
#include "graph_analyzer/plan.pb.h"
#include "onesided/versioned_buffer.h"
#include "rdma/memory_region.h"
#include "runtime/communicator.h"
#include "strategies/ps/ps_options.h"
#include "strategies/bucket_pipeline.h"
#include "strategies/ps/sharding.h"
#include "strategies/ps/slices.h"
#include "strategies/ps/sync_policy.h"
#include "compression/codec.h"
#include "strategies/strategy.h"

namespace rdmaflow::strategies::ps {

// Thread-compatible: one thread drives a rank's strategy.
class PsStrategy final : public Strategy {
 public:
  // kInvalidArgument for bad params (ps_options.h), or pull=read over a
  // communicator other than rdma.
  static absl::StatusOr<std::unique_ptr<PsStrategy>> Create(
      const StrategyOptions& options);
  ~PsStrategy() override;

  std::string name() const override { return "ps"; }
  // Device parameters with pull=read and no codec: the servers' shards
  // (their versioned buffers' copies, the momentum), the pushes' slots and
  // the workers' parameters and gradients are device memory; a pull reads
  // a server's copy device to device, a push writes into a device slot.
  // pull=send (whose reply the communicator stages through host memory)
  // and a codec (which encodes on the host) keep staging.
  bool takes_device_parameters() const override {
    return ps_.pull_by_read && options().codec.empty();
  }
  bool exchanges_on_device() const override { return on_device_; }
  std::string role() const override { return server_ ? "server" : "worker"; }
  bool computes() const override { return !server_; }
  int workers() const override { return workers_; }
  int worker_index() const override { return server_ ? -1 : index_; }
  // A worker: once it ran its steps; a server: once every worker did.
  bool done() const override;
  runtime::TransferCounters counters() const override;
  // Workers push through StrategyOptions::codec, one whose message a server
  // decodes alone (topk; Create() refuses the others).
  bool compresses() const override { return true; }
  compression::CompressionStats compression() const override { return codec_stats_; }

  const PsOptions& ps_options() const { return ps_; }
  // Which server holds which parameters (from Prepare() on): as the
  // analyzer places the model when the context gives its training graph,
  // else by size.
  const std::vector<Shard>& shards() const { return shards_; }
  // Servers: every worker's clock after each gradient this server took, in
  // order (what the sync tests check).
  const std::vector<std::vector<int64_t>>& clock_history() const {
    return history_;
  }
  // Workers: pulls that raced an update and read again.
  int64_t pull_retries() const;
  // Each server's slices (one, the whole shard, without overlap), from
  // Prepare() on.
  const std::vector<std::vector<Slice>>& slices() const { return slices_; }
  // Workers with overlap=on: slices pushed while compute still ran, over
  // all steps so far.
  int64_t overlapped_pushes() const { return overlapped_pushes_; }
  // Workers with overlap=on: pushes begun in the current (or last) step;
  // any thread (a test's compute watches it).
  int pushes_begun() const { return pipeline_ == nullptr ? 0 : pipeline_->buckets_begun(); }
  // Workers with overlap=on under bsp: slices of a step pulled during the
  // step before it (while backward ran or the pushes went), over all steps
  // so far; any thread (a test's compute watches it).
  int64_t prefetched_pulls() const { return prefetched_pulls_.load(std::memory_order_relaxed); }
  // Workers, for the sync tests: each pull of a slice, with how many of
  // every worker's gradients the slice held by the clock words the worker
  // pulled it by; empty unless record_pulls(true) was called first.
  struct PullRecord {
    int64_t clock = 0;  // the step it was pulled for
    int server = 0;
    int slice = 0;
    std::vector<int64_t> held;  // by worker
    bool prefetched = false;    // pulled during the step before `clock`
  };
  void record_pulls(bool on) { record_pulls_ = on; }
  const std::vector<PullRecord>& pulls() const { return pulls_; }

 private:
  PsStrategy(StrategyOptions options, PsOptions ps);

  absl::StatusOr<graph::GraphDef> DoPrepare(std::vector<Parameter> parameters) override;
  graph::PlannerOptions planner_options() const override;
  absl::Status DoStart() override;
  absl::StatusOr<StepReport> DoStep(const ComputeFn& compute) override;
  // After a failure nobody is waited for: the parameters stay as they are.
  absl::Status DoFinish(bool after_failure) override;
  std::string Where() const override;  // "ps server 0 (rank 0)"

  absl::Status CreateCommunicator();
  // Waits for the work torch queued on the device (device parameters; none
  // on the CPU), naming what it was for.
  absl::Status SyncDevice(const char* what) const;
  std::string Ns() const;
  // The float32 elements of each push to each server, one per slice: the
  // slices', or with a codec its largest message's.
  std::vector<std::vector<int64_t>> PushElements() const;
  // The int64 words of a server's clock buffer: each worker's bound and
  // clock, then per slice each worker's gradients it holds.
  size_t ClockWords(int server) const;
  // overlap=on: push_order_, by the model's plan when the context has it
  // (graph_analyzer/gradient_order.h), else last parameters first.
  absl::Status OrderPushes();

  // ps_server.cc
  absl::Status StartServer();
  absl::StatusOr<StepReport> ServerStep();
  // Takes slice `slice` of `worker`'s gradient; sets `completed` when that
  // was the last slice of the worker's step.
  absl::Status TakeGradient(int worker, int slice, bool& completed);
  absl::Status ApplyUpdate(int slice, const at::Tensor& gradient);
  void PublishClocks();
  absl::Status SendReplies();
  absl::Status SendParameters(int worker);

  // ps_worker.cc
  absl::Status StartWorker();
  absl::StatusOr<StepReport> WorkerStep(const ComputeFn& compute);
  // Waits until every server lets the workers finish (every worker pushed
  // every step).
  absl::Status WaitForEnd();
  // Pulls every slice of every shard as soon as it may go into step
  // `clock` (the class comment); `first` is set when the first pull began.
  // Returns the slowest clock seen.
  absl::StatusOr<int64_t> PullWhenPermitted(int64_t clock, absl::Time& first);
  absl::Status ReadClocks(int server, std::vector<int64_t>& words);
  // Reads every server's clock words into words[server]; returns the
  // lowest bound they publish for this worker.
  absl::StatusOr<int64_t> ReadEveryServersClocks(std::vector<std::vector<int64_t>>& words);
  // Reads a slice into its place in `into` (param_region_ or
  // prefetch_region_, laid out alike).
  absl::Status PullSlice(int server, int slice, rdma::MemoryRegion& into);
  // prefetch=on, on the pipeline's communication thread: pulls into
  // prefetch_region_ one slice of the next step that may go into it (under
  // bsp it holds every worker's gradients of this step: its values are
  // final; otherwise it holds this worker's, and the next step is within
  // the bound the servers publish now); true when it pulled one.
  absl::StatusOr<bool> PrefetchOne();
  // The slices prefetched for the current step, copied into the
  // parameters; they are not pulled again.
  absl::Status TakePrefetched();
  absl::Status PullParameters();
  absl::Status PushSlice(int server, int slice);
  absl::Status ReceiveParameters();
  absl::Status WaitForPushes();
  absl::Status PushGradients();
  void DetachParameters();
  // "worker 1 (rank 2), ... at clock c": the workers whose clock in the
  // server's clock words is `clock`.
  std::string WorkersAt(const std::vector<int64_t>& words, int64_t clock) const;

  const PsOptions ps_;
  std::vector<Parameter> parameters_;
  // Device parameters: where their tensors (and the server's) live.
  bool on_device_ = false;
  c10::Device where_ = c10::Device(c10::kCPU);
  // Shards as the analyzer places `model`'s parameters for this job.
  absl::StatusOr<std::vector<Shard>> ShardAsPlanned(
      const graph::GraphDef& model, const std::vector<Parameter>& parameters,
      const std::vector<int64_t>& elements) const;

  std::vector<Shard> shards_;
  std::vector<std::vector<Slice>> slices_;  // by server
  int workers_ = 0;
  bool server_ = false;
  int index_ = 0;  // server index, or worker index (rank - servers)
  std::unique_ptr<runtime::Communicator> communicator_;
  absl::Time start_time_;
  // With a codec: one per shard (workers encode, servers decode), and its
  // counters on this rank.
  std::vector<std::unique_ptr<compression::Codec>> codecs_;  // servers: own shard's only
  std::vector<int64_t> push_elements_;  // with a codec: PushElements()
  compression::CompressionStats codec_stats_;

  // Server.
  std::vector<std::unique_ptr<onesided::VersionedBuffer>> params_;  // by slice
  std::unique_ptr<onesided::VersionedBuffer> clocks_;
  std::unique_ptr<ClockTable> table_;
  at::Tensor momentum_;
  at::Tensor sum_;  // bsp: this step's gradients so far
  // By slice, then worker: the worker's gradients taken into the slice.
  std::vector<std::vector<int64_t>> taken_;
  std::vector<int64_t> applied_;  // bsp, by slice: the steps applied
  int next_worker_ = 0;
  int64_t updates_ = 0;
  std::vector<bool> reply_due_;
  // By worker (server) or by server (worker), then slice.
  std::vector<std::vector<int>> grad_ids_;
  std::vector<int> params_ids_;  // pull=send, likewise
  std::vector<std::vector<int64_t>> history_;
  std::vector<int64_t> pushes_taken_;  // by worker: the next push's step
  at::Tensor decoded_;              // with a codec: a push, decoded

  // Worker.
  std::vector<int64_t> shard_offset_;  // bytes, in the two regions below
  std::unique_ptr<rdma::MemoryRegion> param_region_;
  std::unique_ptr<rdma::MemoryRegion> grad_region_;
  // With a codec: each shard's push, encoded (at message_offset_[s]).
  std::unique_ptr<rdma::MemoryRegion> message_region_;
  std::vector<int64_t> message_offset_;
  std::unique_ptr<rdma::MemoryRegion> clock_scratch_;
  // By server, then slice.
  std::vector<std::vector<std::unique_ptr<onesided::VersionedReader>>> param_readers_;
  std::vector<std::unique_ptr<onesided::VersionedReader>> clock_readers_;
  int64_t pulled_bytes_ = 0;  // parameters read from the servers
  // overlap=on: the slices in the order backward completes them, pushed by
  // the pipeline as they are.
  std::vector<SliceRef> push_order_;
  std::unique_ptr<BucketPipeline> pipeline_;
  int64_t overlapped_pushes_ = 0;
  // overlap=on under bsp: the next step's slices, pulled while this one
  // runs (not into the parameters, which an evaluation between the steps
  // reads whole), and which of them are in, by server then slice, for step
  // prefetch_clock_.
  std::unique_ptr<rdma::MemoryRegion> prefetch_region_;
  std::vector<std::vector<bool>> prefetched_;
  int64_t prefetch_clock_ = -1;
  std::atomic<int64_t> prefetched_pulls_{0};  // any thread reads it (tests)
  bool record_pulls_ = false;
  std::vector<PullRecord> pulls_;
};

}  // namespace rdmaflow::strategies::ps

#endif  // RDMAFLOW_STRATEGIES_PS_PS_STRATEGY_H_
