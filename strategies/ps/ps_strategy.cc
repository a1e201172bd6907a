// File: ps_strategy.cc
// The parameter server's set-up, shared by both roles; ps_server.cc and
// ps_worker.cc hold each role's steps.
#include "strategies/ps/ps_strategy.h"

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph_analyzer/planner.h"
#include "runtime/communicator_factory.h"
#include "runtime/executor.h"
#include "runtime/rank_plan.h"
#include "strategies/ps/ps_graph.h"

namespace rdmaflow::strategies::ps {
absl::StatusOr<std::unique_ptr<PsStrategy>> PsStrategy::Create(
    const StrategyOptions& options) {
  ASSIGN_OR_RETURN(PsOptions ps, PsOptions::Parse(options.params));
  if (ps.pull_by_read && options.communicator != "rdma") {
    return absl::InvalidArgumentError(absl::StrCat(
        "ps pull=read reads parameters by one-sided READ, which needs the "
        "rdma communicator, not '",
        options.communicator, "'; use pull=send with it"));
  }
  if (options.steps < 1 || options.learning_rate <= 0 || options.momentum < 0 ||
      options.momentum >= 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ps needs steps >= 1, a positive learning rate and 0 <= momentum < 1 "
        "(got steps ",
        options.steps, ", lr ", options.learning_rate, ", momentum ",
        options.momentum, ")"));
  }
  return std::unique_ptr<PsStrategy>(new PsStrategy(options, std::move(ps)));
}

PsStrategy::PsStrategy(StrategyOptions options, PsOptions ps)
    : options_(std::move(options)), ps_(std::move(ps)) {}

PsStrategy::~PsStrategy() {
  // In-flight pushes leave from our memory: shut down first. Then the
  // parameters must not keep pointing into memory that goes away with us.
  communicator_.reset();
  if (!server_) DetachParameters();
}

std::string PsStrategy::Ns() const {
  return absl::StrCat(options_.communicator_options.ns, "/ps");
}

std::string PsStrategy::Where() const {
  return absl::StrCat("ps ", server_ ? "server " : "worker ", index_, " (rank ",
                      context_.rank, ")");
}

absl::StatusOr<graph::GraphDef> PsStrategy::Prepare(
    const StrategyContext& context, std::vector<Parameter> parameters) {
  if (context.transport == nullptr || context.store == nullptr) {
    return absl::InvalidArgumentError("ps needs a transport and a store");
  }
  workers_ = context.world_size - ps_.servers;
  if (workers_ < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ps with ", ps_.servers, " servers needs at least ", ps_.servers + 1,
        " ranks (servers first, then workers); the job has ",
        context.world_size));
  }
  std::vector<int64_t> elements;
  for (const Parameter& p : parameters) {
    if (p.tensor.scalar_type() != torch::kFloat32 || !p.tensor.is_cpu() ||
        !p.tensor.is_contiguous()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ps parameter '", p.name, "' must be a contiguous float32 CPU tensor"));
    }
    elements.push_back(p.tensor.numel());
  }
  ASSIGN_OR_RETURN(shards_, ShardParameters(elements, ps_.servers));
  context_ = context;
  parameters_ = std::move(parameters);
  server_ = context.rank < ps_.servers;
  index_ = server_ ? context.rank : context.rank - ps_.servers;
  std::vector<int64_t> shard_elements;
  for (const Shard& shard : shards_) shard_elements.push_back(shard.elements);
  return BuildPsGraph(ps_.servers, workers_, shard_elements, ps_.pull_by_read);
}

absl::Status PsStrategy::CreateCommunicator() {
  std::vector<int64_t> shard_elements;
  for (const Shard& shard : shards_) shard_elements.push_back(shard.elements);
  graph::PlannerOptions planner;
  planner.share_slots = false;  // free-running transfers are never ordered
  ASSIGN_OR_RETURN(plan_, graph::PlanGraph(
                              BuildPsGraph(ps_.servers, workers_, shard_elements,
                                           ps_.pull_by_read),
                              planner));
  runtime::CommunicatorOptions options = options_.communicator_options;
  options.lockstep = false;  // workers run at their own pace
  ASSIGN_OR_RETURN(communicator_,
                   runtime::CreateCommunicator(options_.communicator, plan_,
                                               *context_.transport,
                                               *context_.store, options));
  ASSIGN_OR_RETURN(runtime::RankPlan mine,
                   runtime::RankPlan::Create(plan_, context_.rank));
  const int peers = server_ ? workers_ : ps_.servers;
  grad_ids_.assign(peers, -1);
  params_ids_.assign(peers, -1);
  for (int peer = 0; peer < peers; ++peer) {
    const int worker = server_ ? peer : index_;
    const int server = server_ ? index_ : peer;
    const int peer_rank = server_ ? ps_.servers + peer : peer;
    ASSIGN_OR_RETURN(grad_ids_[peer],
                     mine.IdOf(!server_, GradTensor(worker, server), peer_rank));
    if (!ps_.pull_by_read) {
      ASSIGN_OR_RETURN(params_ids_[peer],
                       mine.IdOf(server_, ParamsTensor(server), peer_rank));
    }
  }
  return absl::OkStatus();
}

absl::Status PsStrategy::Start() {
  if (shards_.empty()) {
    return absl::FailedPreconditionError("ps: call Prepare() before Start()");
  }
  if (started_) return absl::FailedPreconditionError("ps: started twice");
  started_ = true;
  start_time_ = absl::Now();
  RETURN_IF_ERROR(CreateCommunicator());
  return server_ ? StartServer() : StartWorker();
}

absl::StatusOr<StepReport> PsStrategy::Step(const ComputeFn& compute) {
  if (!started_) return absl::FailedPreconditionError("ps: Step() before Start()");
  if (!failure_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        Where(), " is unusable after a failed step: ", failure_.ToString()));
  }
  if (done()) {
    return absl::FailedPreconditionError(
        absl::StrCat(Where(), ": Step() after the last step"));
  }
  if (!server_ && !compute) return absl::InvalidArgumentError("a ps worker needs a ComputeFn");
  absl::StatusOr<StepReport> report = server_ ? ServerStep() : WorkerStep(compute);
  // A failed step may have left a pull, a push or a permission round half
  // done (a timed-out read was cancelled before it returned): nothing is
  // retried on this state.
  if (!report.ok()) failure_ = report.status();
  return report;
}

bool PsStrategy::done() const {
  if (server_) {
    return table_ != nullptr && table_->min_clock() >= options_.steps;
  }
  return clock_ >= options_.steps;
}

runtime::TransferCounters PsStrategy::counters() const {
  runtime::TransferCounters counters = communicator_ == nullptr
                                           ? runtime::TransferCounters{}
                                           : communicator_->counters();
  counters.bytes_read += pulled_bytes_;
  return counters;
}

int64_t PsStrategy::pull_retries() const {
  int64_t retries = 0;
  for (const auto& reader : param_readers_) retries += reader->retries();
  for (const auto& reader : clock_readers_) retries += reader->retries();
  return retries;
}

absl::Status PsStrategy::Finish() {
  if (finished_) return absl::OkStatus();
  finished_ = true;
  if (!started_) return absl::OkStatus();
  absl::Status status = failure_;
  if (!server_ && failure_.ok()) {
    // The final parameters: after every server took every gradient. After
    // a failure nobody is waited for: the parameters stay as they are.
    status = ps_.pull_by_read ? WaitForPermission(kUnbounded).status()
                              : ReceiveParameters();
    if (status.ok() && ps_.pull_by_read) status = PullParameters();
  }
  // Completes or cancels what is in flight (each wait bounded by the
  // timeout), so nothing lands after the regions below are freed.
  absl::Status shutdown = communicator_->Shutdown();
  if (status.ok()) status = shutdown;
  if (!server_) DetachParameters();
  return status;
}

}  // namespace rdmaflow::strategies::ps
