// File: gossip_strategy.cc
#include "strategies/gossip/gossip_strategy.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "ATen/core/grad_mode.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "graph_analyzer/graph_builder.h"
#include "onesided/progress/waits.h"
#include "rdma/rendezvous.h"
#include "strategies/device_tensors.h"
#include "strategies/strategy_params.h"

namespace rdmaflow::strategies::gossip {

absl::StatusOr<std::unique_ptr<GossipStrategy>> GossipStrategy::Create(
    const StrategyOptions& options) {
  GossipOptions gossip;
  std::string topology = "random", mode = "pull";
  int64_t seed = 1;
  StrategyParams params("gossip", options.params);
  RETURN_IF_ERROR(params.Real("beta", 1e-6, 1.0, &gossip.beta));
  RETURN_IF_ERROR(params.Int("period", 1, &gossip.period));
  RETURN_IF_ERROR(params.Choice("topology", {"random", "ring"}, &topology));
  RETURN_IF_ERROR(params.Choice("mode", {"pull", "push"}, &mode));
  RETURN_IF_ERROR(params.Int("copies", 2, &gossip.copies));
  RETURN_IF_ERROR(params.Int("seed", int64_t{0}, &seed));
  std::string overlap = "off";
  RETURN_IF_ERROR(params.Choice("overlap", {"off", "on"}, &overlap));
  RETURN_IF_ERROR(params.Done());
  RETURN_IF_ERROR(CheckTrainingOptions("gossip", options.steps,
                                       options.learning_rate, options.momentum));
  ASSIGN_OR_RETURN(gossip.topology, ParseTopology(topology));
  gossip.seed = static_cast<uint64_t>(seed);
  gossip.mode = mode == "push" ? GossipMode::kPush : GossipMode::kPull;
  gossip.overlap = overlap == "on";
  if (gossip.overlap && gossip.mode == GossipMode::kPush) {
    return absl::InvalidArgumentError(
        "gossip parameter overlap=on needs mode=pull: a push's one-sided write reads the "
        "parameters, which the next step rewrites while it would be in flight");
  }
  return std::unique_ptr<GossipStrategy>(new GossipStrategy(options, gossip));
}

std::string GossipStrategy::Ns() const {
  return absl::StrCat(options().communicator_options.ns, "/gossip");
}

absl::StatusOr<graph::GraphDef> GossipStrategy::DoPrepare(std::vector<Parameter> parameters) {
  RETURN_IF_ERROR(Adopt(std::move(parameters), 2));
  bytes_ = replica_->bytes();
  // Declared: each rank's published parameters (read by its peers).
  const int world = context().world_size;
  graph::GraphBuilder b("gossip");
  b.SetWorldSize(world);
  for (int r = 0; r < world; ++r) {
    b.SetRank(r);
    b.Variable(absl::StrCat("r", r, "/params"), graph::DT_FLOAT32,
               {static_cast<int64_t>(bytes_ / sizeof(float))});
  }
  return std::move(b).Build();
}

absl::Status GossipStrategy::DoStart() {
  rdma::Store& store = *context().store;
  const absl::Duration timeout = options().communicator_options.timeout;
  const int world = context().world_size;
  if (gossip_.mode == GossipMode::kPull) {
    // Device parameters: the published copies and the scratch a peer's are
    // read into are device memory, so a read moves device to device.
    on_device_ = context().device != nullptr;
    ASSIGN_OR_RETURN(published_,
                     onesided::VersionedBuffer::Create(
                         links(), absl::StrCat("r", context().rank), bytes_, gossip_.copies,
                         on_device_ ? device::MemoryKind::kDevice : device::MemoryKind::kHost));
    RETURN_IF_ERROR(Publish());
    readers_.resize(world);
    for (int r = 0; r < world; ++r) {
      if (r == context().rank) continue;
      ASSIGN_OR_RETURN(readers_[r],
                       onesided::VersionedReader::Create(links(), absl::StrCat("r", r), r,
                                                         timeout));
    }
    ASSIGN_OR_RETURN(rdma::MemoryRegion scratch, AllocateScratch());
    scratch_ = std::make_unique<rdma::MemoryRegion>(std::move(scratch));
    if (gossip_.overlap) {
      background_ = std::make_unique<CommunicationThread>(
          loop(), absl::StrCat("gossip rank ", context().rank, "'s read of a peer"));
    }
  } else {
    ASSIGN_OR_RETURN(mailbox_, onesided::Mailbox::Create(links(), world, bytes_, timeout));
    for (int r = 0; r < world; ++r) {
      if (r != context().rank) RETURN_IF_ERROR(mailbox_->Connect(r));
    }
  }
  gone_.assign(world, false);
  selector_ = std::make_unique<PeerSelector>(gossip_.topology, context().rank, world,
                                             gossip_.seed);
  // Nobody reads (or writes) a peer before every peer is set up.
  return onesided::Barrier(loop(), store, Ns(), "published", world, timeout);
}

absl::StatusOr<rdma::MemoryRegion> GossipStrategy::AllocateScratch() {
  rdma::Transport& transport = *context().transport;
  return on_device_ ? transport.AllocateDevice(bytes_) : transport.Allocate(bytes_);
}

absl::Status GossipStrategy::Publish() {
  const at::Tensor& theta = replica_->flat();
  // Complete before the copy's stamp says whole (VersionedBuffer::TryUpdate):
  // on a device, torch's copy is waited for, which also completes the
  // step's kernels and the last mix's reads of the scratch, before a read
  // can rewrite it.
  // A copy that fails publishes nothing (VersionedBuffer::TryUpdate).
  absl::Status copied = published_->TryUpdate([&](std::byte* next, const std::byte*) {
    at::NoGradGuard no_grad;
    FloatsOver(next, theta.numel(), theta.device()).copy_(theta);
    return SynchronizeTorchDevice(theta.device());
  });
  if (!copied.ok()) {
    return absl::Status(copied.code(), absl::StrCat("gossip rank ", context().rank,
                                                    ": publishing its parameters: ",
                                                    copied.message()));
  }
  return absl::OkStatus();
}

void GossipStrategy::Mix(int peer, const std::byte* theta) {
  at::NoGradGuard no_grad;
  at::Tensor& mine = replica_->flat();
  at::Tensor other = FloatsOver(const_cast<std::byte*>(theta), mine.numel(), mine.device());
  mine.mul_(1.0 - gossip_.beta).add_(other, gossip_.beta);
  peers_mixed_.push_back(peer);
}

bool GossipStrategy::LostPeer(int peer, const absl::Status& status) {
  if (!absl::IsUnavailable(status) && !absl::IsDeadlineExceeded(status)) return false;
  gone_[peer] = true;
  peers_lost_.push_back(peer);
  peer_errors_.push_back(status);
  std::fprintf(stderr, "gossip rank %d: rank %d is gone, gossiping with the others: %s\n",
               context().rank, peer, status.ToString().c_str());
  return true;
}

absl::Status GossipStrategy::Exchange() {
  if (gossip_.mode == GossipMode::kPush) return Push();
  return gossip_.overlap ? StartPull() : Pull();
}

absl::Status GossipStrategy::Pull() {
  RETURN_IF_ERROR(Publish());
  const int peer = selector_->Next(gone_);
  if (peer < 0) return absl::OkStatus();  // alone
  return TakeRead(peer, readers_[peer]->Read({scratch_.get(), 0, bytes_}));
}

absl::Status GossipStrategy::StartPull() {
  RETURN_IF_ERROR(Publish());
  const int peer = selector_->Next(gone_);
  if (peer < 0) return absl::OkStatus();  // alone
  // The thread reads and then serves the peers until FinishExchange(); the
  // read's own failure is handled there, on this thread, as Pull() does.
  read_ = absl::UnknownError("the read did not run");
  RETURN_IF_ERROR(background_->Start([this, peer] {
    read_ = readers_[peer]->Read({scratch_.get(), 0, bytes_});
    reads_finished_.fetch_add(1, std::memory_order_release);
    return absl::OkStatus();
  }));
  reading_ = peer;
  return absl::OkStatus();
}

absl::Status GossipStrategy::FinishExchange(StepReport& report) {
  if (reading_ < 0) return absl::OkStatus();
  const absl::Time begin = absl::Now();
  absl::Status stopped = background_->Stop();
  report.Add(StepSpan::Kind::kWait, begin, absl::Now());
  // Up to this wait: the step's own communication span covers the wait.
  report.Add(StepSpan::Kind::kCommunication, background_->work_begin(),
             std::min(background_->work_end(), begin));
  const int peer = std::exchange(reading_, -1);
  RETURN_IF_ERROR(stopped);
  return TakeRead(peer, read_);
}

absl::Status GossipStrategy::TakeRead(int peer, const absl::StatusOr<uint64_t>& version) {
  if (!version.ok()) {
    // The read gave up, normally after cancelling what it posted, but a
    // backend that could not cancel in time may still land it here: never
    // mix in this buffer again (it stays allocated while we live).
    RETURN_IF_ERROR(RetireScratch());
    return LostPeer(peer, version.status()) ? absl::OkStatus() : version.status();
  }
  ++counters_.tensors_received;
  counters_.bytes_read += static_cast<int64_t>(bytes_);
  Mix(peer, scratch_->data());
  return absl::OkStatus();
}

absl::Status GossipStrategy::RetireScratch() {
  ASSIGN_OR_RETURN(rdma::MemoryRegion fresh, AllocateScratch());
  retired_scratch_.push_back(std::move(scratch_));
  scratch_ = std::make_unique<rdma::MemoryRegion>(std::move(fresh));
  return absl::OkStatus();
}

absl::Status GossipStrategy::Push() {
  mailbox_->Collect([&](int sender, const std::byte* message) {
    ++counters_.tensors_received;
    Mix(sender, message);
  });
  const int peer = selector_->Next(gone_);
  if (peer < 0) return absl::OkStatus();
  absl::Status sent = mailbox_->Send(
      peer, reinterpret_cast<const std::byte*>(replica_->flat().data_ptr<float>()));
  if (!sent.ok()) return LostPeer(peer, sent) ? absl::OkStatus() : sent;
  ++counters_.tensors_sent;
  counters_.bytes_sent += static_cast<int64_t>(bytes_);
  return absl::OkStatus();
}

absl::Status GossipStrategy::DoFinish(bool after_failure) {
  // A read still running (overlap=on) is ended and mixed in: the last
  // step's mix, as without overlap. After a failure it is only ended. Its
  // error is returned after the finish below: peers may be reading our
  // memory whatever it was.
  absl::Status last_read;
  if (reading_ >= 0) {
    if (after_failure) {
      reading_ = -1;
      background_->Stop().IgnoreError();
    } else {
      StepReport unused;
      last_read = FinishExchange(unused);
    }
  }
  absl::Status finished = FinishWithPeers();
  // The last mix's kernels read the scratch, which goes with us.
  if (on_device_) {
    absl::Status synced = SynchronizeTorchDevice(replica_->flat().device());
    if (finished.ok()) finished = synced;
  }
  return last_read.ok() ? finished : last_read;
}

absl::Status GossipStrategy::FinishWithPeers() {
  // Peers may still be reading (or writing) our memory, and over TCP they
  // need our progress: wait until every peer has finished or is gone.
  rdma::Store& store = *context().store;
  const std::string done = absl::StrCat(Ns(), "/finished/");
  RETURN_IF_ERROR(store.Add(absl::StrCat(done, context().rank), 1).status());
  const absl::Duration timeout = options().communicator_options.timeout;
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<bool> waiting(context().world_size, false);
  for (int r = 0; r < context().world_size; ++r) waiting[r] = r != context().rank && !gone_[r];
  // A peer that has not finished is probed, without waiting for the
  // answer: over TCP a probe needs the peer's progress, and a peer that
  // finishes meanwhile (it saw us finished) stops progressing, so its
  // probe is then left to run out (a flush holds no memory; its state
  // outlives us). A probe runs out `timeout` after it was posted, not at
  // the finish's deadline: one posted just before the deadline is waited
  // for, so that a live peer which answers it is reported as not finished
  // rather than lost. No probe is posted after the deadline, so the
  // finish takes at most twice the timeout.
  std::vector<std::shared_ptr<ProbeState>> probes(context().world_size);
  absl::Time next_probe = absl::Now();
  while (true) {
    int left = 0, probed = 0;
    const absl::Time now = absl::Now();
    const bool probe = now >= next_probe && now <= deadline;
    for (int r = 0; r < context().world_size; ++r) {
      if (!waiting[r]) continue;
      ASSIGN_OR_RETURN(int64_t finished, store.Add(absl::StrCat(done, r), 0));
      if (finished == 0) {
        absl::Status alive = TakeProbe(r, probes[r], probe, timeout);
        if (!alive.ok()) {
          // A peer marks itself finished before it can leave: one that
          // finished and left while the probe was out is not lost.
          ASSIGN_OR_RETURN(finished, store.Add(absl::StrCat(done, r), 0));
          if (finished == 0 && !LostPeer(r, alive)) return alive;
        }
      }
      waiting[r] = finished == 0 && !gone_[r];
      left += waiting[r] ? 1 : 0;
      probed += waiting[r] && probes[r] != nullptr ? 1 : 0;
    }
    if (left == 0) return absl::OkStatus();
    if (absl::Now() > deadline && probed == 0) {
      std::vector<int> unfinished;
      for (int r = 0; r < context().world_size; ++r) {
        if (waiting[r]) unfinished.push_back(r);
      }
      return absl::DeadlineExceededError(absl::StrCat(
          "gossip rank ", context().rank, ": live peers (ranks ", absl::StrJoin(unfinished, ", "),
          ") did not finish within ", absl::FormatDuration(timeout),
          "; check that every rank runs the same number of steps and calls Finish()"));
    }
    if (probe) next_probe = absl::Now() + absl::Milliseconds(100);
    // Serve the peers' reads (and writes) for a millisecond, idling as the
    // loop's wait policy says.
    const absl::Time slice = absl::Now() + absl::Milliseconds(1);
    RETURN_IF_ERROR(loop().WaitUntil([&] { return absl::Now() >= slice; },
                                     slice + absl::Seconds(1),
                                     [] { return std::string("peers to finish"); }));
  }
}

absl::Status GossipStrategy::TakeProbe(int peer, std::shared_ptr<ProbeState>& probe,
                                       bool post, absl::Duration timeout) {
  if (probe != nullptr) {
    if (probe->answered) {
      const absl::Status status = std::exchange(probe, nullptr)->status;
      if (status.ok()) return status;
      return absl::Status(status.code(), absl::StrCat("gossip rank ", context().rank,
                                                      ": probe of rank ", peer, ": ",
                                                      status.message()));
    }
    if (absl::Now() > probe->posted + timeout) {
      return absl::DeadlineExceededError(absl::StrCat(
          "gossip rank ", context().rank, ": rank ", peer,
          " neither finished nor answered a probe within ", absl::FormatDuration(timeout)));
    }
    return absl::OkStatus();  // still out
  }
  if (!post) return absl::OkStatus();
  auto state = std::make_shared<ProbeState>();
  state->posted = absl::Now();
  rdma::Completion answered = [state](absl::Status status) {
    state->status = std::move(status);
    state->answered = true;
  };
  absl::Status posted = gossip_.mode == GossipMode::kPush
                            ? mailbox_->PostProbe(peer, std::move(answered))
                            : readers_[peer]->PostProbe(std::move(answered));
  if (absl::IsResourceExhausted(posted)) return absl::OkStatus();  // the next round
  if (!posted.ok()) {
    return absl::Status(posted.code(), absl::StrCat("gossip rank ", context().rank,
                                                    ": posting a probe of rank ", peer, ": ",
                                                    posted.message()));
  }
  probe = std::move(state);
  return absl::OkStatus();
}

}  // namespace rdmaflow::strategies::gossip
