// File: strategy.h
// -----------------------------------------------------------------------------
// Strategy: a distributed training algorithm (parameter server, all-reduce,
// gossip, ...) as a plugin over the runtime. A strategy
//   1. Prepare(): declares the tensors it exchanges, as a GraphDef the graph
//      analyzer plans (which rank sends which tensor to whom);
//   2. Start(): plans that graph and connects (collective over the job);
//   3. Step(): runs one iteration of this rank's role: a worker computes
//      (through the harness's ComputeFn) and communicates; a server handles
//      what its workers sent;
//   4. Finish(): leaves every worker with the final parameters and shuts the
//      communication down (collective).
// The base class checks that order (and refuses a call out of it) once for
// every strategy; a strategy implements DoPrepare/DoStart/DoStep/DoFinish.
// The harness (train/) owns the model and the data; strategies see only the
// model's parameters, as float32 CPU tensors (a device's where the strategy
// takes device parameters) they may re-point (set_data) at registered
// memory so that pulls and pushes move them without copies.
//
//   ASSIGN_OR_RETURN(auto strategy, registry.Create("ps", options));
//   ASSIGN_OR_RETURN(graph::GraphDef graph, strategy->Prepare(context, params));
//   RETURN_IF_ERROR(strategy->Start());
//   while (!strategy->done()) ASSIGN_OR_RETURN(StepReport r, strategy->Step(fn));
//   RETURN_IF_ERROR(strategy->Finish());
#ifndef RDMAFLOW_STRATEGIES_STRATEGY_H_
#define RDMAFLOW_STRATEGIES_STRATEGY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ATen/core/Tensor.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "compression/compressed_allreduce.h"
#include "graph_analyzer/graph.pb.h"
#include "graph_analyzer/plan.pb.h"
#include "graph_analyzer/planner.h"
#include "onesided/links/peer_links.h"
#include "onesided/progress/progress_loop.h"
#include "rdma/store.h"
#include "rdma/transport.h"
#include "runtime/communicator_options.h"
#include "runtime/counters.h"
#include "strategies/step_timeline.h"

namespace rdmaflow::rdma::device_path {
class DeviceTransport;
}  // namespace rdmaflow::rdma::device_path

namespace rdmaflow::strategies {

// What every strategy is configured with; `params` holds the strategy's own
// settings ("key=value", e.g. servers=1, sync=ssp:3), which it validates
// (unknown keys are an error listing the known ones). Value type.
struct StrategyOptions {
  int64_t steps = 100;  // iterations per worker
  double learning_rate = 0.05;
  double momentum = 0.9;
  // "rdma" (zero copy), "rdma_copy" or "grpc": see runtime/communicator.h.
  std::string communicator = "rdma";
  runtime::CommunicatorOptions communicator_options;
  std::map<std::string, std::string> params;
  // A gradient codec (compression/codec.h, "topk:ratio=0.01"), or empty for
  // none. Strategies that move gradients take it (compresses()); the
  // registry refuses it for the others.
  std::string codec;
};

// One batch of a worker's data: inputs and int64 class labels.
struct Batch {
  at::Tensor x;
  at::Tensor y;
};

// The model cut at a split point (by default before its first fully
// connected layer), for strategies that place the two parts on different
// ranks (layer_separated). features(x) -> activations; head(activations) ->
// logits. Parameters whose names are in `head_parameters` belong to the
// head, the others to the features.
struct ModelSplit {
  std::function<at::Tensor(const at::Tensor&)> features;
  std::function<at::Tensor(const at::Tensor&)> head;
  std::vector<std::string> head_parameters;
  std::vector<int64_t> sample_shape;      // one input, e.g. {1, 28, 28}
  std::vector<int64_t> activation_shape;  // one sample's activations
  // Where features() returns its activations and head() its logits: the
  // CPU (host tensors in and out), or the device of the parameters a split
  // over a device's own parameters runs on (DeviceModel::ResidentSplit:
  // StrategyContext::device's tensors; on the fake device, the CPU), where
  // layer_separated keeps the activations and their gradients in device
  // slots. Either part takes its input on the host or on that device.
  c10::Device device = c10::kCPU;
  // Set by a split that runs on copies of the parameters (a device's,
  // train/device_model.h); null otherwise. The strategy calls it once it
  // has changed the parameters' values (an update, a model shared in):
  // features, head and a backward still due through them run with the
  // values of the moment they run, as on the parameters themselves.
  std::function<void()> parameters_changed;
};

// The job as this rank sees it. The transport and store outlive the
// strategy; so do `split` and what `next_batch` reads, when given.
struct StrategyContext {
  int rank = 0;
  int world_size = 1;
  rdma::Transport* transport = nullptr;
  rdma::Store* store = nullptr;
  // Samples per batch on a computing rank.
  int64_t batch_size = 0;
  // For strategies that run the model themselves (layer_separated): the
  // split model, and the next batch of this worker's data (valid from
  // Start() on, on ranks that compute).
  const ModelSplit* split = nullptr;
  std::function<absl::StatusOr<Batch>()> next_batch;
  // The model's single-rank training graph (graph_analyzer/training_graph.h),
  // when the trainer has one (a TorchScript model): strategies that place
  // the model take their placement from the analyzer's plan of it (ps
  // shards as PlaceTrainingGraph places its parameters). Null: each
  // strategy decides from the parameter list alone.
  const graph::GraphDef* model = nullptr;
  // This rank died and was started again: it joins the others where they
  // are (only where supports_rejoin()).
  bool rejoining = false;
  // Where the trainer runs the model on a device and the strategy
  // takes_device_parameters(): `transport` itself, a DeviceTransport whose
  // runtime holds the parameters (they are that device's tensors: CUDA, or
  // CPU on the fake device), so the strategy exchanges them in device
  // regions. Null: host parameters.
  rdma::device_path::DeviceTransport* device = nullptr;
};

// A model parameter (float32, contiguous; CPU, or the device of
// StrategyContext::device); its name is unique.
struct Parameter {
  std::string name;
  at::Tensor tensor;
};

// What the harness's compute function reports for one batch.
struct ComputeResult {
  double loss = 0;
  double accuracy = 0;
  int64_t samples = 0;
};
// Runs forward and backward on the worker's next batch with the current
// parameter values; the gradients accumulate into each parameter's .grad()
// (which the strategy may have pointed at its own memory; it zeroes them).
using ComputeFn = std::function<absl::StatusOr<ComputeResult>()>;

// One Step() as it went.
struct StepReport {
  int64_t clock = 0;      // the iteration (worker) or update (server) count
  int64_t min_clock = 0;  // the slowest worker's clock, as this rank saw it
  ComputeResult compute;  // workers only
  absl::Duration compute_time;
  absl::Duration comm_time;  // pulls, pushes, and waits for permission
  absl::Duration wait_time;  // of which: waiting for slower workers
  // When each happened (step_timeline.h): the trainer's timeline.
  StepTimeline timeline;

  // Records a span of the step: into the timeline, and its length into
  // compute_time, comm_time or wait_time (a wait lies inside a
  // communication span the strategy records too).
  void Add(StepSpan::Kind kind, absl::Time begin, absl::Time end) {
    timeline.Add(kind, begin, end);
    const absl::Duration length = timeline.spans().back().end - begin;
    switch (kind) {
      case StepSpan::Kind::kCompute:
        compute_time += length;
        break;
      case StepSpan::Kind::kCommunication:
        comm_time += length;
        break;
      case StepSpan::Kind::kWait:
        wait_time += length;
        break;
    }
  }
};

// The base of every strategy: it owns the Prepare/Start/Step/Finish state
// machine, so each call's order is checked, and refused with one set of
// messages, in one place; strategies implement the Do*() steps.
//
//   state        Prepare()      Start()        Step()            Finish()
//   new          DoPrepare      refused        refused           OK, nothing to do
//   prepared     refused        DoStart        refused           OK, nothing to do
//   started      refused        refused        DoStep (*)        DoFinish(false)
//   step failed  refused        refused        refused, quoting  DoFinish(true), then
//                                              the failure       returns the failure
//   start failed refused        refused        refused, quoting  OK, nothing to do
//   finished     refused        refused        refused           OK (idempotent)
//
// (*) refused once done(). A failed DoPrepare leaves the strategy new (fix
// the context and call Prepare() again); a failed DoStart or DoStep leaves
// it unusable: what it had posted or connected may be half done, and nothing
// is retried on that state. Every refusal is kFailedPrecondition naming the
// strategy, the rank and what to call first.
//
// Thread-compatible: one thread drives a rank's strategy.
class Strategy {
 public:
  virtual ~Strategy() = default;
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  virtual std::string name() const = 0;
  // This rank's role, e.g. "server" or "worker".
  virtual std::string role() const = 0;
  // True on ranks that train on the data (run ComputeFn or read batches).
  virtual bool computes() const = 0;
  // True when this rank holds the whole model's current parameters during
  // training (so the harness may evaluate it between steps); after
  // Finish() every computing rank holds the final ones.
  virtual bool holds_full_model() const { return computes(); }
  // True where the computing ranks do not hold the whole model between
  // steps but ShareModel() gives it them (layer_separated): a harness that
  // evaluates between steps calls ShareModel() on every rank first.
  virtual bool shares_model() const { return false; }
  // True on ranks whose Step() calls the ComputeFn (a rank that computes
  // from StrategyContext::next_batch itself needs none).
  virtual bool needs_compute_fn() const { return computes(); }
  // True where the strategy runs the model's halves itself, from
  // StrategyContext::split and next_batch (layer_separated, allreduce
  // overlap=forward), on any rank: a harness hands it a split model (on
  // its device, with --device). Known from Create() on.
  virtual bool runs_split() const { return false; }
  // True when a rank that died can be started again and rejoin the running
  // job (StrategyContext::rejoining): moshpit.
  virtual bool supports_rejoin() const { return false; }
  // True where the strategy exchanges parameters that live on a device
  // (StrategyContext::device): the harness then hands it the device
  // model's own parameters, with nothing staged through host memory
  // (allreduce and layer_separated without a codec, moshpit, gossip pull,
  // ps pull=read without a codec). The others take host parameters.
  virtual bool takes_device_parameters() const { return false; }
  // From Start() on: whether this rank's exchanges of the parameters run
  // in device regions (device parameters taken; what a harness reports).
  virtual bool exchanges_on_device() const { return false; }
  // After Prepare(): how many ranks compute, and which of them this is
  // (-1 if it does not compute); the harness shards the data by these.
  virtual int workers() const = 0;
  virtual int worker_index() const = 0;

  // Declares what this strategy exchanges for `parameters` in `context`'s
  // job. kInvalidArgument for a job the strategy cannot run (no transport
  // or store, a rank outside the job, too few ranks, ...), naming the
  // requirement.
  absl::StatusOr<graph::GraphDef> Prepare(const StrategyContext& context,
                                          std::vector<Parameter> parameters);
  // After a successful Prepare(): the analyzer's plan of the graph it
  // declared, made with the strategy's own planner options. The one plan
  // the strategy's communicator runs (ps, layer_separated) and what a
  // trainer reports (registered bytes, transfers).
  const plan::TransferPlan& plan() const { return plan_; }
  // What the transport's links cost this rank so far (zeros before
  // Prepare()): one endpoint per peer any of its protocols reached (a
  // second, control, endpoint only where a ring asked for one) and at most
  // one liveness watch (where a protocol subscribed: the communicator, a
  // ring), whatever the number of protocols. Moshpit's per-group links are
  // not counted here.
  onesided::PeerLinksStats link_stats() const {
    return own_.links != nullptr ? own_.links->stats() : onesided::PeerLinksStats{};
  }
  // Connects. Collective.
  absl::Status Start();
  // One iteration of this rank's role. kInvalidArgument without a
  // ComputeFn on a rank that needs one; kFailedPrecondition out of order
  // (see the table above), after done(), or after a failed step.
  absl::StatusOr<StepReport> Step(const ComputeFn& compute);
  // True once this rank has no more iterations to run; by default once
  // `steps` of them succeeded.
  virtual bool done() const { return clock_ >= options_.steps; }
  // Where shares_model(): gives every rank the parts of the model's current
  // parameters that other ranks train, so a computing rank holds the whole
  // model until its next Step(); what each rank trains is not touched, so
  // training goes on exactly as without the call. Collective: every rank
  // calls it after the same number of steps. Nothing to do (OK) where
  // !shares_model(). kFailedPrecondition out of order, as Step(); a
  // failure leaves the strategy unusable, as a failed step does.
  absl::Status ShareModel();
  // Leaves the computing ranks with the final parameters, then shuts down.
  // Collective, except after a failed step: then it waits for nobody's
  // progress and returns the step's failure.
  absl::Status Finish();

  virtual runtime::TransferCounters counters() const = 0;
  // Whether the strategy sends its gradients through StrategyOptions::codec.
  virtual bool compresses() const { return false; }
  // The codec's counters on this rank (zero without one).
  virtual compression::CompressionStats compression() const { return {}; }

 protected:
  explicit Strategy(StrategyOptions options) : options_(std::move(options)) {}

  // The steps the state machine runs, each at most once (DoPrepare again
  // after it failed) and only in order; the contracts are the public
  // calls'. The context is set (and checked) before DoPrepare runs.
  virtual absl::StatusOr<graph::GraphDef> DoPrepare(std::vector<Parameter> parameters) = 0;
  // How Prepare() plans the declared graph (plan()).
  virtual graph::PlannerOptions planner_options() const { return {}; }
  virtual absl::Status DoStart() = 0;
  virtual absl::StatusOr<StepReport> DoStep(const ComputeFn& compute) = 0;
  // Only where shares_model(), between steps.
  virtual absl::Status DoShareModel() { return absl::OkStatus(); }
  // Only after a successful DoStart. `after_failure`: a step failed, so the
  // other ranks may never come to a barrier: wait for none of them, only
  // complete or cancel what this rank posted. Its error is then logged
  // (Finish returns the step's failure).
  virtual absl::Status DoFinish(bool after_failure) = 0;

  // How messages name this rank once prepared: "<name> rank <r>" by
  // default ("ps server 0 (rank 0)" where a role says more).
  virtual std::string Where() const;
  const StrategyOptions& options() const { return options_; }
  const StrategyContext& context() const { return context_; }
  // The transport's one progress loop (docs/thread_model.md), made by
  // Prepare() on its thread before DoPrepare() runs: every protocol the
  // strategy runs over the transport (its communicator, rings, mailboxes,
  // versioned readers) registers with it, so one wait progresses them all.
  // It outlives them (a member of the base).
  onesided::ProgressLoop& loop() { return *own_.loop; }
  // The transport's links on loop() (onesided/links), made with it under
  // options().communicator_options.ns: every protocol the strategy runs
  // takes its endpoint to a peer and its liveness watch from them, so a
  // peer costs one endpoint and at most one watch whatever the protocols.
  // They
  // outlive the protocols (a member of the base). Moshpit's rings are the
  // exception: their members come and go (a rank that rejoins is a new
  // process), so each group connects links of its own.
  onesided::PeerLinks& links() { return *own_.links; }
  const onesided::PeerLinks& links() const { return *own_.links; }
  // options().communicator_options with loop() and links() set: what a
  // strategy creates its communicators with.
  runtime::CommunicatorOptions communicator_options() const;
  // The steps that succeeded so far (the iteration the next Step() runs).
  int64_t clock() const { return clock_; }
  // For a rank that rejoins a running job (in DoStart): continue from
  // iteration `clock`.
  void SkipTo(int64_t clock) { clock_ = clock; }
  // True once Finish() was called (during DoFinish, not yet).
  bool finished() const { return phase_ == Phase::kFinished; }

 private:
  enum class Phase { kNew, kPrepared, kStarted, kFinished };

  // kFailedPrecondition for `call` out of order: "<who>: <call> <why>".
  absl::Status Refuse(absl::string_view call, absl::string_view why) const;
  // `run()`, with an exception it throws as kInternal naming the rank and
  // `what`.
  template <typename F>
  auto Guarded(absl::string_view what, F&& run) const -> decltype(run());
  // kFailedPrecondition quoting the Start() or step that failed.
  absl::Status Unusable() const;
  // OK once started and not failed; else Refuse(call, ...) or Unusable().
  absl::Status CheckRunning(absl::string_view call) const;
  // Where(), or just the name before anything was prepared.
  std::string Who() const;

  const StrategyOptions options_;
  StrategyContext context_;
  // A base member: it outlives the derived class's, whose protocols leave
  // it first. From Prepare(): the loop and the links on it (links first
  // to go).
  onesided::OwnLinks own_;
  std::vector<onesided::OwnLinks> retired_;
  Phase phase_ = Phase::kNew;
  plan::TransferPlan plan_;  // from Prepare()
  int64_t clock_ = 0;
  // Of the Start() or Step() that failed: the rank is unusable.
  absl::Status failure_;
  bool failed_in_start_ = false;
};

}  // namespace rdmaflow::strategies

#endif  // RDMAFLOW_STRATEGIES_STRATEGY_H_
