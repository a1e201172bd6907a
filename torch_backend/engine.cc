#include "torch_backend/engine.h"

#include <c10/core/Device.h>
#include <c10/core/DeviceType.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <future>
#include <new>
#include <numeric>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rdma/builtin_transports.h"
#include "torch_backend/shared_tensor_allocator.h"

namespace rdmaflow::torch_backend {
namespace {

// Store keys, under the group's own (prefixed) store and its run scope.
std::string Namespace(const BackendOptions& options) {
  return absl::StrCat("rdmaflow/", options.store_scope);
}

// `run()`, with an exception it throws (LibTorch's tensor operations and
// allocations throw) turned into an error naming `what`: no exception may
// end the engine thread, and with it the process.
template <typename F>
auto Guarded(absl::string_view what, F&& run) -> decltype(run()) {
  try {
    return run();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": out of memory (std::bad_alloc)"));
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat(what, ": LibTorch error: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrCat(what, ": an unknown exception"));
  }
}

// Engines alive in the process: a caller blocked in one group's inline
// asynchronous collective could hold up another group's peers, so with
// several groups every asynchronous call goes through the engine threads.
std::atomic<int> live_engines{0};
// True on engine threads: a Future callback they run must not take a
// group's transport (the thread already holds its own).
thread_local bool on_engine_thread = false;

}  // namespace

Engine::Engine(int rank, int size, const BackendOptions& options, TensorDevice* device)
    : rank_(rank), size_(size), options_(options), device_(device) {
  ++live_engines;
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Start(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    const BackendOptions& options, TensorDevice* device) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rdmaflow process group: rank ", rank, " is outside a group of ", size));
  }
  if (store.get() == nullptr) {
    return absl::InvalidArgumentError("rdmaflow process group: no store given");
  }
  std::unique_ptr<Engine> engine(new Engine(rank, size, options, device));
  // Shared: the thread may still be inside set_value() when Start() returns.
  auto ready = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> set_up = ready->get_future();
  Engine* self = engine.get();
  engine->thread_ = std::thread([self, store, ready] {
    self->UseStreamOfItsOwn();
    absl::Status status = self->SetUp(store);
    const bool ok = status.ok();
    if (!ok) {
      absl::MutexLock drive(&self->drive_mu_);
      self->TearDown();
    }
    ready->set_value(std::move(status));
    if (ok) self->Loop();
  });
  absl::Status status = set_up.get();
  if (!status.ok()) {
    engine->thread_.join();
    return status;
  }
  return engine;
}

void Engine::UseStreamOfItsOwn() {
  if (device_ == nullptr || device_->fake()) return;
  try {
    const c10::DeviceType cuda = c10::DeviceType::CUDA;
    if (!c10::impl::hasDeviceGuardImpl(cuda)) return;
    const c10::impl::DeviceGuardImplInterface* impl = c10::impl::getDeviceGuardImpl(cuda);
    const c10::Device where(cuda, static_cast<c10::DeviceIndex>(device_->index()));
    impl->setDevice(where);
    impl->exchangeStream(impl->getStreamFromGlobalPool(where, /*isHighPriority=*/false));
  } catch (const std::exception& e) {
    std::fprintf(stderr,
                 "rdmaflow rank %d: the engine's torch work stays on the default stream of "
                 "cuda:%d (%s)\n",
                 rank_, device_->index(), e.what());
  }
}

void Engine::UseSharedTensors() {
  // Only where the peers read our memory at all: elsewhere a segment
  // would be read as ordinary memory is (staged).
  absl::Status installed =
      ring_->external()
          ? InstallSharedTensorAllocator(options_.shared_tensors_min_bytes)
          : absl::FailedPreconditionError(absl::StrCat(
                "the ranks cannot read each other's memory: ", ring_->external_refusal()));
  if (installed.ok()) {
    Count([](BackendStats& stats) { stats.shared_tensors = 1; });
    return;
  }
  static std::atomic<bool> said{false};  // every group would say the same
  if (!said.exchange(true)) {
    std::fprintf(stderr,
                 "rdmaflow: rank %d: RDMAFLOW_SHARED_TENSORS=on, but CPU tensors stay in "
                 "private memory: %s\n",
                 rank_, std::string(installed.message()).c_str());
  }
}

absl::Status Engine::SetUp(const c10::intrusive_ptr<c10d::Store>& store) {
  store_ = std::make_unique<rdma::torch::C10dStore>(store, "the process group's store");
  absl::StatusOr<std::unique_ptr<rdma::Transport>> transport =
      rdma::CreateBuiltinTransport(options_.transport, options_.transport_params, rank_);
  if (!transport.ok()) {
    return absl::Status(transport.status().code(),
                        absl::StrCat("rdmaflow rank ", rank_, ": creating transport '",
                                     options_.transport, "' (RDMAFLOW_TRANSPORT, "
                                     "RDMAFLOW_TRANSPORT_PARAMS): ",
                                     transport.status().message()));
  }
  transport_ = *std::move(transport);
  onesided::ProgressLoopOptions loop;
  loop.name = absl::StrCat("rdmaflow rank ", rank_);
  loop.wait = options_.wait;
  // A waited-on peer is probed each second, as the Messenger's own default.
  loop.liveness_interval = absl::Seconds(1);
  loop_ = std::make_unique<onesided::ProgressLoop>(*transport_, loop);
  onesided::PeerLinksOptions links;
  links.timeout = options_.timeout;
  ASSIGN_OR_RETURN(links_, onesided::PeerLinks::Create(*transport_, *store_, Namespace(options_),
                                                       *loop_, links));
  onesided::MessengerOptions messenger;
  messenger.loop = loop_.get();
  messenger.name = "c10d";
  messenger.slot_bytes = options_.message_slot_bytes;
  messenger.slots = options_.message_slots;
  messenger.timeout = options_.timeout;
  messenger.wait = options_.wait;
  ASSIGN_OR_RETURN(messenger_, onesided::Messenger::Create(*links_, size_, messenger));
  direct_ = std::make_unique<collectives::DirectCollectives>(*messenger_, options_.timeout);
  const size_t capacity = options_.staging_bytes + options_.registered_bytes;
  if (size_ > 1) {
    collectives::AllReduceGroupOptions ring;
    ring.ring.name = "c10d";
    ring.ring.capacity_bytes = capacity;
    ring.ring.chunk_bytes = options_.chunk_bytes;
    ring.ring.slots = options_.ring_slots;
    ring.ring.timeout = options_.timeout;
    ring.ring.wait = options_.wait;
    ring.ring.loop = loop_.get();
    // Registered tensors are the caller's: a neighbour that writes after a
    // call gave up must not reach them.
    ring.ring.gather_in_slots_from = options_.staging_bytes;
    ring.direct = options_.direct;
    ring.external_reads = options_.cma;
    std::vector<int> members(size_);
    std::iota(members.begin(), members.end(), 0);
    ASSIGN_OR_RETURN(ring_, collectives::AllReduceGroup::Create(*links_, members, ring));
    data_region_ = &ring_->data_region();
    if (ring_->external()) Count([](BackendStats& stats) { stats.single_copy_reads = 1; });
    if (options_.shared_tensors) UseSharedTensors();
    if (options_.cma && ring_->direct() && !ring_->external()) {
      // Said once per process: every group would say the same.
      static std::atomic<bool> said{false};
      if (!said.exchange(true)) {
        std::fprintf(stderr,
                     "rdmaflow: rank %d: ordinary tensors are staged for all-reduces (no "
                     "single-copy reads of the peers' memory: %s); RDMAFLOW_CMA=off "
                     "silences this\n",
                     rank_, ring_->external_refusal().c_str());
      }
    }
  } else {
    ASSIGN_OR_RETURN(rdma::MemoryRegion region, transport_->Allocate(capacity));
    own_region_ = std::make_unique<rdma::MemoryRegion>(std::move(region));
    data_region_ = own_region_.get();
  }
  messenger_->AddSendRegion(data_region_);
  if (size_ > 1) {
    // Collective, so every rank must agree first: a rank without a device
    // (no GPU, CUDA failed to start, RDMAFLOW_DEVICE_MB=0) keeps every rank
    // on host twins, said once.
    const std::string ns = absl::StrCat(Namespace(options_), "/device");
    std::string mine = "yes";
    if (device_ == nullptr) mine = "no device";
    if (options_.device_bytes == 0) mine = "RDMAFLOW_DEVICE_MB=0";
    RETURN_IF_ERROR(store_->Set(absl::StrCat(ns, "/want/", rank_), mine));
    std::string refusal;
    for (int r = 0; r < size_ && refusal.empty(); ++r) {
      ASSIGN_OR_RETURN(std::string theirs,
                       store_->Get(absl::StrCat(ns, "/want/", r), options_.timeout));
      // The store's bytes are any peer's: shown escaped and cut short.
      if (theirs != "yes") {
        refusal = absl::StrCat("rank ", r, ": ", absl::CEscape(theirs.substr(0, 120)));
      }
    }
    if (refusal.empty()) {
      ASSIGN_OR_RETURN(device_allreduce_, DeviceAllReduce::Create(*store_, ns, rank_, size_,
                                                                  *device_, options_));
      // Device to device sends only where every rank has them on: a send
      // and its receive must both take that path.
      RETURN_IF_ERROR(store_->Set(absl::StrCat(ns, "/p2p/", rank_),
                                  options_.device_p2p ? "auto" : "off"));
      bool p2p = device_allreduce_->copies_broadcasts();
      for (int r = 0; r < size_; ++r) {
        ASSIGN_OR_RETURN(std::string theirs,
                         store_->Get(absl::StrCat(ns, "/p2p/", r), options_.timeout));
        p2p = p2p && theirs == "auto";
      }
      if (p2p) device_p2p_ = std::make_unique<DeviceP2p>(*device_);
    } else if (device_ != nullptr && rank_ == 0) {
      std::fprintf(stderr,
                   "rdmaflow: CUDA tensors are all-reduced through host memory (%s)\n",
                   refusal.c_str());
    }
  }
  ASSIGN_OR_RETURN(registered_,
                   runtime::torch::RegisteredAllocator::Over(
                       *data_region_, options_.staging_bytes, options_.registered_bytes));
  return absl::OkStatus();
}

void Engine::Submit(Op op) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(op));
  ++queued_;
  ++unfinished_;
  wake_.Signal();
}

bool Engine::OnEngineThread() { return on_engine_thread; }

bool Engine::TryRunInline(Op& op, Inline when, size_t bytes) {
  if (!op.run || op.post || on_engine_thread) return false;
  if (when == Inline::kIfSmall && (options_.inline_bytes == 0 ||
                                   bytes > options_.inline_bytes || live_engines.load() > 1)) {
    return false;
  }
  if (!drive_mu_.TryLock()) return false;
  bool busy;
  {
    absl::MutexLock lock(&mu_);
    busy = stop_ || unfinished_ > 0;
  }
  if (busy || !messenger_->idle()) {
    drive_mu_.Unlock();
    return false;
  }
  loop_->AdoptOnCurrentThread();
  const absl::Status status = Execute(op);
  Settle();
  const bool progress = !messenger_->idle();
  {
    absl::MutexLock lock(&mu_);
    ++stats_.inline_calls;
    nudged_ = nudged_ || progress;
    if (progress) wake_.Signal();
  }
  drive_mu_.Unlock();
  op.work->Complete(status);
  return true;
}

void Engine::Loop() {
  // Pending point-to-point operations are progressed between batches; the
  // thread backs off while they move nothing (a receive waiting for a late
  // sender must not starve the ranks beside it).
  onesided::IdleBackoff backoff(options_.wait);
  on_engine_thread = true;
  drive_mu_.Lock();
  loop_->AdoptOnCurrentThread();
  // The last operation before the thread sleeps, completed once it has let
  // go of the transport: the caller it wakes can then run its next small
  // call inline instead of finding the transport still held.
  WorkPtr last;
  absl::Status last_status;
  while (true) {
    std::deque<Op> batch;
    if (queued_.load() > 0 || stopping_.load() || messenger_->idle()) {
      // Asleep, the thread lets go of the transport: a caller may run a
      // small collective on its own thread meanwhile (TryRunInline).
      const bool idle = messenger_->idle();
      bool stop = false;
      if (idle) {
        drive_mu_.Unlock();
        CompleteLast(last, last_status);
        stop = TakeBatch(/*sleep=*/true, batch);
        drive_mu_.Lock();
        loop_->AdoptOnCurrentThread();
      } else {
        CompleteLast(last, last_status);
        stop = TakeBatch(/*sleep=*/false, batch);
      }
      if (stop) break;
    }
    for (Op& op : batch) {
      const absl::Status status = Execute(op);
      {
        absl::MutexLock lock(&mu_);
        --unfinished_;
      }
      // A post completes from the Messenger, unless it failed to go out.
      if (op.post && status.ok()) continue;
      if (&op == &batch.back() && queued_.load() == 0 && messenger_->idle()) {
        last = op.work;  // completed at the top, after letting go
        last_status = status;
      } else {
        op.work->Complete(status);
      }
    }
    if (!batch.empty()) Settle();
    if (!messenger_->idle()) {
      absl::Status status = Guarded("progressing point-to-point operations",
                                    [&] { return messenger_->Progress(); });
      if (!status.ok()) broken_.Update(status);
      ExpireOverdue(absl::Now());
      if (messenger_->progressed() || !batch.empty()) {
        backoff.Reset();
      } else {
        backoff.Idle();
      }
    }
  }
  TearDown();
  drive_mu_.Unlock();
}

void Engine::CompleteLast(WorkPtr& last, const absl::Status& status) {
  if (!last) return;
  last->Complete(status);
  last.reset();
}

bool Engine::TakeBatch(bool sleep, std::deque<Op>& batch) {
  absl::MutexLock lock(&mu_);
  while (sleep && !(stop_ || nudged_ || !queue_.empty())) wake_.Wait(&mu_);
  nudged_ = false;
  batch.swap(queue_);
  queued_ = 0;
  // Pending point-to-point operations do not hold the group up: the
  // tear-down cancels them.
  return stop_ && batch.empty();
}

absl::Status Engine::Execute(Op& op) {
  if (op.post) {
    absl::StatusOr<onesided::Messenger::OpId> posted = Guarded(
        op.what, [&] { return op.post(*this, op.work); });
    if (!posted.ok()) return posted.status();
    posted_.push_back({op.work, *posted, absl::Now() + options_.timeout, op.what});
    return absl::OkStatus();
  }
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the process group is unusable after an earlier failure: ", broken_.message()));
  }
  // Collectives move data, not autograd history, on whichever thread runs
  // them (a caller's grad mode must not change what an inline call does).
  at::NoGradGuard no_grad;
  absl::Status status = Guarded("a collective", [&] { return op.run(*this, op.work); });
  // A collective that failed in the middle leaves the ring (and the peers)
  // in an unknown state; bad arguments refused up front do not.
  if (!status.ok() && !absl::IsInvalidArgument(status)) broken_ = status;
  return status;
}

void Engine::ExpireOverdue(absl::Time now) {
  for (Posted& posted : posted_) {
    if (now < posted.deadline || posted.work->isCompleted()) continue;
    // Fires the operation's completion, which fails the Work; the
    // messenger lets go of the tensor.
    messenger_->Abandon(
        posted.id,
        absl::DeadlineExceededError(absl::StrCat(
            "rdmaflow rank ", rank_, ": ", posted.what, " did not complete within ",
            absl::FormatDuration(options_.timeout),
            " (the process group's timeout); did the peer post the matching ",
            "operation, with the same tag?")));
    // An operation the messenger had already finished with.
    posted.work->Complete(absl::DeadlineExceededError(
        absl::StrCat("rdmaflow rank ", rank_, ": ", posted.what, " timed out")));
  }
}

void Engine::Settle() {
  // Point-to-point work that has completed is forgotten.
  posted_.erase(std::remove_if(posted_.begin(), posted_.end(),
                               [](const Posted& p) { return p.work->isCompleted(); }),
                posted_.end());
  const onesided::MessengerStats& messenger = messenger_->stats();
  const onesided::PeerLinksStats& links = links_->stats();
  Count([&](BackendStats& stats) {
    stats.messages_sent = messenger.messages_sent;
    stats.message_bytes_staged = messenger.staged_bytes;
    stats.peer_endpoints = links.endpoints;
    stats.peer_watches = links.watches;
  });
}

void Engine::TearDown() {
  // Point-to-point operations that never completed (a peer that never
  // posted the other side) are cancelled, so no wait() hangs. The messenger
  // lets go of their tensors first: the shutdown below keeps progressing
  // it, and a message arriving meanwhile must be discarded, not written
  // into a tensor whose Work already said cancelled.
  const absl::Status cancelled = absl::CancelledError(
      "the rdmaflow process group was destroyed before this operation completed");
  for (Posted& posted : posted_) {
    if (posted.work->isCompleted()) continue;
    if (messenger_ != nullptr) messenger_->Abandon(posted.id, cancelled);
    posted.work->Complete(cancelled);
  }
  posted_.clear();
  // The peers' memory mapped here is let go before the last barrier (the
  // device all-reduce's shutdown), after which they may free theirs; this
  // rank's device memory (its region, its pins: tensors a peer mapped) goes
  // only after it. Without that barrier (a group broken by an earlier
  // failure, or a barrier some peer missed) a live peer may still map it,
  // and CUDA leaves freeing it then undefined: it stays allocated.
  if (device_p2p_ != nullptr) device_p2p_->CloseMappings();
  if (device_allreduce_ != nullptr) {
    absl::Status met = broken_;
    std::string what = "the process group broke earlier";
    if (met.ok()) {
      met = device_allreduce_->Shutdown(std::min(absl::Seconds(10), options_.timeout));
      what = "shutdown of the device all-reduce";
      if (!met.ok()) Count([](BackendStats& stats) { ++stats.teardown_failures; });
    }
    if (!met.ok()) {
      const size_t pinned = device_p2p_ != nullptr ? device_p2p_->pinned() : 0;
      std::fprintf(stderr,
                   "rdmaflow rank %d: %s (%s): a peer may still map this rank's device "
                   "memory, which stays allocated until this process exits (%zu bytes of "
                   "region and pool: RDMAFLOW_DEVICE_MB and RDMAFLOW_DEVICE_POOL_MB; tensors "
                   "sent device to device that a peer maps: %zu)\n",
                   rank_, what.c_str(), std::string(met.message()).c_str(),
                   options_.device_bytes + options_.device_pool_bytes, pinned);
      device_allreduce_.release();
      device_p2p_.release();
    }
  }
  if (device_allreduce_ != nullptr && device_allreduce_->pool_used() > 0) {
    // Tensors in the device pool outlive the group: its device memory must
    // stay valid (the peers are done reading it: shut down above).
    std::fprintf(stderr,
                 "rdmaflow rank %d: %zu bytes of tensors in the device pool outlive the "
                 "process group; its device memory stays allocated\n",
                 rank_, device_allreduce_->pool_used());
    device_allreduce_.release();
  }
  device_allreduce_.reset();
  device_p2p_.reset();
  if (ring_ != nullptr && broken_.ok()) {
    // Collective: every rank tears down; a peer's writes into our memory
    // must be over before it is freed.
    if (absl::Status s = ring_->Shutdown(std::min(absl::Seconds(10), options_.timeout));
        !s.ok()) {
      Count([](BackendStats& stats) { ++stats.teardown_failures; });
      std::fprintf(stderr, "rdmaflow rank %d: shutdown: %s\n", rank_,
                   std::string(s.message()).c_str());
    }
  }
  if (registered_ != nullptr && registered_->used() > 0) {
    // Registered tensors outlive the group: their memory must stay valid.
    std::fprintf(stderr,
                 "rdmaflow rank %d: %zu bytes of registered tensors outlive the "
                 "process group; its transport memory stays mapped\n",
                 rank_, registered_->used());
    registered_.release();
    ring_.release();
    own_region_.release();
    messenger_.release();
    links_.release();
    loop_.release();
    transport_.release();
    return;
  }
  registered_.reset();
  direct_.reset();
  messenger_.reset();
  ring_.reset();
  own_region_.reset();
  links_.reset();
  loop_.reset();
  transport_.reset();
}

void Engine::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    stopping_ = true;
    wake_.Signal();
  }
  if (thread_.joinable()) thread_.join();
}

Engine::~Engine() {
  Stop();
  --live_engines;
}

absl::StatusOr<at::Tensor> Engine::AllocateRegistered(const std::vector<int64_t>& shape,
                                                      at::ScalarType dtype) {
  return registered_->Empty(shape, dtype);
}

bool Engine::IsRegistered(const at::Tensor& tensor) const {
  return registered_->Holds(tensor) ||
         (device_allreduce_ != nullptr && device_allreduce_->InPool(tensor));
}

absl::Status Engine::MoveToRegistered(const at::Tensor& tensor) {
  if (registered_->Holds(tensor)) return absl::OkStatus();
  RETURN_IF_ERROR(NoPostsInFlight());
  RETURN_IF_ERROR(registered_->MoveIn(tensor));
  if (!registered_->Holds(tensor)) return absl::OkStatus();  // empty: nothing to move
  CountMove(tensor);
  return absl::OkStatus();
}

absl::Status Engine::MoveToDevicePool(const at::Tensor& tensor) {
  if (device_allreduce_ == nullptr) {
    return absl::FailedPreconditionError(
        "the group has no device all-reduce, so no device pool (no device on some rank, "
        "RDMAFLOW_DEVICE_MB=0, or a group of one)");
  }
  if (device_allreduce_->InPool(tensor)) return absl::OkStatus();
  RETURN_IF_ERROR(NoPostsInFlight());
  RETURN_IF_ERROR(device_allreduce_->MoveIn(tensor, absl::Now() + options_.timeout));
  if (!device_allreduce_->InPool(tensor)) return absl::OkStatus();  // empty
  CountMove(tensor);
  Count([](BackendStats& stats) { ++stats.moved_to_device_pool; });
  return absl::OkStatus();
}

absl::Status Engine::NoPostsInFlight() const {
  const auto in_flight = std::find_if(posted_.begin(), posted_.end(), [](const Posted& p) {
    return !p.work->isCompleted();
  });
  if (in_flight == posted_.end()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "point-to-point operations are in flight (", in_flight->what,
      ") and may hold the tensor's memory; move it when they are done"));
}

void Engine::CountMove(const at::Tensor& tensor) {
  const int64_t bytes = static_cast<int64_t>(tensor.storage().nbytes());
  Count([&](BackendStats& stats) {
    ++stats.moved_to_registered;
    stats.moved_bytes += bytes;
  });
}

BackendStats Engine::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void Engine::Count(const std::function<void(BackendStats&)>& update) {
  absl::MutexLock lock(&mu_);
  update(stats_);
}

}  // namespace rdmaflow::torch_backend
