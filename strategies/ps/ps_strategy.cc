// File: ps_strategy.cc
// The parameter server's set-up, shared by both roles; ps_server.cc and
// ps_worker.cc hold each role's steps.
#include "strategies/ps/ps_strategy.h"

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "absl/container/flat_hash_map.h"
#include "graph_analyzer/gradient_order.h"
#include "graph_analyzer/placement.h"
#include "graph_analyzer/planner.h"
#include "runtime/communicator_factory.h"
#include "compression/codec.h"
#include "runtime/rank_plan.h"
#include "strategies/device_tensors.h"
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
  if (!options.codec.empty()) {
    absl::StatusOr<std::unique_ptr<compression::Codec>> probe =
        compression::CreateCodec(options.codec, compression::CodecContext{}, 1);
    if (probe.ok() && (*probe)->max_message_bytes() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ps pushes each worker's gradients alone, through a codec whose message its server "
          "decodes alone (topk); --codec ", options.codec,
          " needs a collective among the members (allreduce, layer_separated)"));
    }
    RETURN_IF_ERROR(probe.status());
    if (ps.overlap) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ps overlap=on pushes each slice of a shard on its own; --codec ", options.codec,
          " encodes a shard's gradient whole: use one or the other"));
    }
  }
  return std::unique_ptr<PsStrategy>(new PsStrategy(options, std::move(ps)));
}

std::vector<std::vector<int64_t>> PsStrategy::PushElements() const {
  std::vector<std::vector<int64_t>> elements;
  for (size_t s = 0; s < slices_.size(); ++s) {
    elements.emplace_back();
    if (!push_elements_.empty()) {
      elements.back().push_back(push_elements_[s]);  // a codec: one message
      continue;
    }
    for (const Slice& slice : slices_[s]) elements.back().push_back(slice.elements);
  }
  return elements;
}

size_t PsStrategy::ClockWords(int server) const {
  return static_cast<size_t>(workers_) * (2 + slices_[server].size());
}

PsStrategy::PsStrategy(StrategyOptions options, PsOptions ps)
    : Strategy(std::move(options)), ps_(std::move(ps)) {}

PsStrategy::~PsStrategy() {
  // In-flight pushes leave from our memory: shut down first. Then the
  // parameters must not keep pointing into memory that goes away with us.
  communicator_.reset();
  pipeline_.reset();
  if (!server_) DetachParameters();
}

std::string PsStrategy::Ns() const {
  return absl::StrCat(options().communicator_options.ns, "/ps");
}

absl::Status PsStrategy::SyncDevice(const char* what) const {
  if (!on_device_) return absl::OkStatus();
  absl::Status synced = SynchronizeTorchDevice(where_);
  if (synced.ok()) return synced;
  return absl::Status(synced.code(), absl::StrCat(Where(), ": waiting on ", where_.str(),
                                                  " for ", what, ": ", synced.message()));
}

std::string PsStrategy::Where() const {
  return absl::StrCat("ps ", server_ ? "server " : "worker ", index_, " (rank ",
                      context().rank, ")");
}

absl::StatusOr<std::vector<Shard>> PsStrategy::ShardAsPlanned(
    const graph::GraphDef& model, const std::vector<Parameter>& parameters,
    const std::vector<int64_t>& elements) const {
  graph::PlacementSpec spec;
  spec.strategy = "ps";
  spec.servers = ps_.servers;
  spec.workers = workers_;
  absl::StatusOr<graph::GraphDef> placed = graph::PlaceTrainingGraph(model, spec);
  if (!placed.ok()) {
    return absl::Status(placed.status().code(),
                        absl::StrCat("ps: placing the model's training graph for ",
                                     ps_.servers, " servers and ", workers_,
                                     " workers: ", placed.status().message()));
  }
  ASSIGN_OR_RETURN(auto servers, graph::PsParameterServers(*placed));
  if (servers.size() != parameters.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ps: the model's plan places ", servers.size(), " parameters, the model has ",
        parameters.size(), "; the importer names parameters as named_parameters() does, "
        "renaming one that collides with a generated name (docs/bring_your_model.md)"));
  }
  std::vector<int> owner;
  for (const Parameter& p : parameters) {
    const auto it = servers.find(p.name);
    if (it == servers.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "ps: parameter '", p.name, "' is not in the model's plan (its parameters are "
          "named as the model's named_parameters())"));
    }
    owner.push_back(it->second);
  }
  return ShardParametersOnto(elements, owner, ps_.servers);
}

absl::Status PsStrategy::OrderPushes() {
  const size_t n = parameters_.size();
  std::vector<int> ready_rank(n);
  // Without a plan, DDP's guess: backward runs the model backwards.
  for (size_t i = 0; i < n; ++i) ready_rank[i] = static_cast<int>(n - 1 - i);
  if (context().model != nullptr) {
    absl::StatusOr<std::vector<graph::ReadyGradient>> order =
        graph::GradientReadyOrder(*context().model);
    if (!order.ok()) {
      return absl::Status(order.status().code(),
                          absl::StrCat("ps overlap=on: the order of the model's gradients: ",
                                       order.status().message()));
    }
    absl::flat_hash_map<std::string, size_t> index;
    for (size_t i = 0; i < n; ++i) {
      if (!index.emplace(parameters_[i].name, i).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ps: two parameters are named '", parameters_[i].name,
            "'; the plan tells them apart by name"));
      }
    }
    // Parameters backward never reaches go last.
    std::fill(ready_rank.begin(), ready_rank.end(), static_cast<int>(order->size()));
    for (size_t g = 0; g < order->size(); ++g) {
      const auto it = index.find((*order)[g].parameter);
      if (it == index.end()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "ps overlap=on: the model's plan has a gradient for '", (*order)[g].parameter,
            "', which the model does not name among its parameters (docs/bring_your_model.md)"));
      }
      ready_rank[it->second] = static_cast<int>(g);
    }
  }
  push_order_ = PushOrder(slices_, ready_rank);
  return absl::OkStatus();
}

absl::StatusOr<graph::GraphDef> PsStrategy::DoPrepare(std::vector<Parameter> parameters) {
  const StrategyContext& job = context();
  workers_ = job.world_size - ps_.servers;
  if (workers_ < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ps with ", ps_.servers, " servers needs at least ", ps_.servers + 1,
        " ranks (servers first, then workers); the job has ",
        job.world_size));
  }
  // Device parameters (StrategyContext::device): shards, slots and pulls
  // on the device.
  on_device_ = job.device != nullptr;
  where_ = TensorDeviceOf(job.device);
  std::vector<int64_t> elements;
  for (const Parameter& p : parameters) {
    if (p.tensor.scalar_type() != at::kFloat || p.tensor.device() != where_ ||
        !p.tensor.is_contiguous()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ps parameter '", p.name, "' must be a contiguous float32 tensor on ", where_.str(),
          "; it is a ", c10::toString(p.tensor.scalar_type()), " tensor on ",
          p.tensor.device().str(), p.tensor.is_contiguous() ? "" : ", not contiguous"));
    }
    elements.push_back(p.tensor.numel());
  }
  if (job.model != nullptr) {
    ASSIGN_OR_RETURN(shards_, ShardAsPlanned(*job.model, parameters, elements));
  } else {
    ASSIGN_OR_RETURN(shards_, ShardParameters(elements, ps_.servers));
  }
  parameters_ = std::move(parameters);
  server_ = job.rank < ps_.servers;
  index_ = server_ ? job.rank : job.rank - ps_.servers;
  codecs_.clear();
  push_elements_.clear();
  if (!options().codec.empty()) {
    // One codec per shard: a worker's encode its pushes (with their
    // residuals); a server keeps only its own shard's, to decode.
    for (size_t s = 0; s < shards_.size(); ++s) {
      absl::StatusOr<std::unique_ptr<compression::Codec>> codec = compression::CreateCodec(
          options().codec,
          // Alone: each push is decoded by itself.
          compression::CodecContext{0, 1, static_cast<uint64_t>(job.rank)},
          static_cast<size_t>(shards_[s].elements));
      if (!codec.ok()) {
        return absl::Status(codec.status().code(),
                            absl::StrCat("ps server ", s, "'s shard: ", codec.status().message(),
                                         " (more servers make smaller shards)"));
      }
      push_elements_.push_back(static_cast<int64_t>(
          ((*codec)->max_message_bytes() + sizeof(float) - 1) / sizeof(float)));
      if (server_ && static_cast<int>(s) != index_) codec->reset();
      codecs_.push_back(std::move(codec).value());
    }
  }
  slices_.clear();
  for (const Shard& shard : shards_) {
    const int64_t shard_bytes = shard.elements * static_cast<int64_t>(sizeof(float));
    const int64_t slice_bytes = ps_.slice_bytes > 0 ? ps_.slice_bytes : AutoSliceBytes(shard_bytes);
    slices_.push_back(SliceShard(shard, ps_.overlap ? slice_bytes / sizeof(float) : 0));
    if (static_cast<int64_t>(slices_.back().size()) > kMaxSlices) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ps slice_bytes=", ps_.slice_bytes, " cuts a shard of ", shard.elements * sizeof(float),
          " bytes into ", slices_.back().size(), " slices, more than ", kMaxSlices,
          " (each a transfer and a versioned buffer of its own): use larger slices"));
    }
  }
  if (ps_.overlap) RETURN_IF_ERROR(OrderPushes());
  std::vector<int64_t> shard_elements;
  for (const Shard& shard : shards_) shard_elements.push_back(shard.elements);
  return BuildPsGraph(ps_.servers, workers_, shard_elements, PushElements(), ps_.overlap,
                      !codecs_.empty(), ps_.pull_by_read, on_device_);
}

graph::PlannerOptions PsStrategy::planner_options() const {
  graph::PlannerOptions planner;
  planner.share_slots = false;  // free-running transfers are never ordered
  return planner;
}

absl::Status PsStrategy::CreateCommunicator() {
  runtime::CommunicatorOptions free_running = communicator_options();
  free_running.lockstep = false;  // workers run at their own pace
  ASSIGN_OR_RETURN(communicator_,
                   runtime::CreateCommunicator(options().communicator, plan(),
                                               *context().transport,
                                               *context().store, free_running));
  ASSIGN_OR_RETURN(runtime::RankPlan mine,
                   runtime::RankPlan::Create(plan(), context().rank));
  const int peers = server_ ? workers_ : ps_.servers;
  grad_ids_.assign(peers, {});
  params_ids_.assign(peers, -1);
  for (int peer = 0; peer < peers; ++peer) {
    const int worker = server_ ? peer : index_;
    const int server = server_ ? index_ : peer;
    const int peer_rank = server_ ? ps_.servers + peer : peer;
    for (size_t k = 0; k < slices_[server].size(); ++k) {
      ASSIGN_OR_RETURN(
          int id, mine.IdOf(!server_,
                            GradTensor(worker, server, ps_.overlap ? static_cast<int>(k) : -1),
                            peer_rank));
      grad_ids_[peer].push_back(id);
    }
    if (!ps_.pull_by_read) {
      ASSIGN_OR_RETURN(params_ids_[peer],
                       mine.IdOf(server_, ParamsTensor(server), peer_rank));
    }
  }
  return absl::OkStatus();
}

absl::Status PsStrategy::DoStart() {
  start_time_ = absl::Now();
  RETURN_IF_ERROR(CreateCommunicator());
  return server_ ? StartServer() : StartWorker();
}

absl::StatusOr<StepReport> PsStrategy::DoStep(const ComputeFn& compute) {
  // A failed step may leave a pull, a push or a permission round half done
  // (a timed-out read was cancelled before it returned): the base retries
  // nothing on that state.
  return server_ ? ServerStep() : WorkerStep(compute);
}

bool PsStrategy::done() const {
  if (server_) {
    return table_ != nullptr && table_->min_clock() >= options().steps;
  }
  return Strategy::done();
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
  for (const auto& server : param_readers_) {
    for (const auto& reader : server) retries += reader->retries();
  }
  for (const auto& reader : clock_readers_) retries += reader->retries();
  return retries;
}

absl::Status PsStrategy::DoFinish(bool after_failure) {
  absl::Status status;
  if (!server_ && !after_failure) {
    // The final parameters: after every server took every gradient, and
    // after torch's kernels that read the parameters (an evaluation since
    // the last step) are complete.
    status = SyncDevice("the kernels before the final pull");
    if (status.ok()) status = ps_.pull_by_read ? WaitForEnd() : ReceiveParameters();
    if (status.ok() && ps_.pull_by_read) status = PullParameters();
  }
  // Completes or cancels what is in flight (each wait bounded by the
  // timeout), so nothing lands after the regions below are freed.
  absl::Status shutdown = communicator_->Shutdown();
  if (status.ok()) status = shutdown;
  pipeline_.reset();  // its hooks, before the parameters are detached
  if (!server_) DetachParameters();
  return status;
}

}  // namespace rdmaflow::strategies::ps
