#include "strategies/testing/slow_peer_transport.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace rdmaflow::strategies::testing {

// Shared by a decorating endpoint and the operations it holds: the inner
// endpoint stays alive (and open) while a held operation may still need it.
struct SlowPeerTransport::EndpointState {
  int peer = -1;
  std::shared_ptr<rdma::Endpoint> inner;
  bool closed = false;  // by the poster
  bool inner_closed = false;
  int held = 0;      // operations of this endpoint being held
  int released = 0;  // released, completion not fired yet
};

struct SlowPeerTransport::HeldOp {
  Op op;
  std::shared_ptr<EndpointState> endpoint;
  int rule = -1;
  rdma::LocalSlice local;
  rdma::RemoteRegion remote;  // a copy: the poster's descriptor may go
  uint64_t remote_offset = 0;
  uint64_t remote_length = 0;
  std::optional<uint32_t> notification;
  rdma::Completion done;
};

// Thread-compatible, like its transport.
class SlowPeerEndpoint final : public rdma::Endpoint {
 public:
  SlowPeerEndpoint(SlowPeerTransport& transport,
                   std::shared_ptr<SlowPeerTransport::EndpointState> state)
      : transport_(transport), state_(std::move(state)) {}
  ~SlowPeerEndpoint() override {
    Close().IgnoreError();
    // Operations still held for a later release would need this endpoint:
    // they end now, nothing moved.
    auto& ops = transport_.held_ops_;
    for (auto it = ops.begin(); it != ops.end();) {
      if ((*it)->endpoint == state_) {
        transport_.FireLater(std::move((*it)->done),
                             absl::CancelledError(absl::StrCat(
                                 "endpoint to rank ", state_->peer,
                                 " was destroyed with the operation held")));
        --state_->held;
        it = ops.erase(it);
      } else {
        ++it;
      }
    }
    transport_.CloseInnerIfDone(*state_);
  }

  int peer_rank() const override { return state_->peer; }
  std::string Describe() const override { return state_->inner->Describe(); }

  absl::Status PostWrite(const rdma::LocalSlice& src, const rdma::RemoteSlice& dst,
                         std::optional<uint32_t> notification,
                         rdma::Completion done) override {
    return Post(SlowPeerTransport::Op::kWrite, src, &dst, notification, std::move(done));
  }
  absl::Status PostRead(const rdma::LocalSlice& dst, const rdma::RemoteSlice& src,
                        rdma::Completion done) override {
    return Post(SlowPeerTransport::Op::kRead, dst, &src, std::nullopt, std::move(done));
  }
  absl::Status PostFlush(rdma::Completion done) override {
    return Post(SlowPeerTransport::Op::kFlush, {}, nullptr, std::nullopt, std::move(done));
  }

  absl::Status Close() override {
    if (state_->closed) return absl::OkStatus();
    state_->closed = true;
    auto& ops = transport_.held_ops_;
    for (auto it = ops.begin(); it != ops.end();) {
      HeldOp& op = **it;
      if (op.endpoint == state_ && !transport_.rules_[op.rule].hold.survives_close) {
        transport_.FireLater(std::move(op.done),
                             absl::CancelledError(absl::StrCat(
                                 "endpoint to rank ", state_->peer,
                                 " was closed (the operation was held, nothing moved)")));
        --state_->held;
        it = ops.erase(it);
      } else {
        ++it;
      }
    }
    transport_.CloseInnerIfDone(*state_);
    return absl::OkStatus();
  }

 private:
  using HeldOp = SlowPeerTransport::HeldOp;

  absl::Status Post(SlowPeerTransport::Op op, const rdma::LocalSlice& local,
                    const rdma::RemoteSlice* remote, std::optional<uint32_t> notification,
                    rdma::Completion done) {
    if (state_->closed) {
      return absl::FailedPreconditionError(
          absl::StrCat("endpoint to rank ", state_->peer, " is closed"));
    }
    transport_.BeforePost(op, state_->peer);
    rdma::Completion wrapped = [outstanding = transport_.outstanding_, peer = state_->peer,
                                done = std::move(done)](absl::Status status) mutable {
      --(*outstanding)[peer];
      std::move(done)(std::move(status));
    };
    const int rule = transport_.Decide(op, state_->peer, local.length);
    if (rule >= 0) {
      auto held = std::make_unique<HeldOp>();
      held->op = op;
      held->endpoint = state_;
      held->rule = rule;
      held->local = local;
      if (remote != nullptr) {
        held->remote = *remote->region;
        held->remote_offset = remote->offset;
        held->remote_length = remote->length;
      }
      held->notification = notification;
      held->done = std::move(wrapped);
      transport_.held_ops_.push_back(std::move(held));
      ++state_->held;
      ++transport_.held_count_;
      ++(*transport_.outstanding_)[state_->peer];
      return absl::OkStatus();
    }
    absl::Status posted;
    switch (op) {
      case SlowPeerTransport::Op::kWrite:
        posted = state_->inner->PostWrite(local, *remote, notification, std::move(wrapped));
        break;
      case SlowPeerTransport::Op::kRead:
        posted = state_->inner->PostRead(local, *remote, std::move(wrapped));
        break;
      case SlowPeerTransport::Op::kFlush:
        posted = state_->inner->PostFlush(std::move(wrapped));
        break;
    }
    if (posted.ok()) ++(*transport_.outstanding_)[state_->peer];
    return posted;
  }

  SlowPeerTransport& transport_;
  std::shared_ptr<SlowPeerTransport::EndpointState> state_;
};

SlowPeerTransport::SlowPeerTransport(rdma::Transport& inner) : TransportWrapper(inner) {}

// Held operations that were never released are dropped with their
// completions (as FaultyTransport drops what it holds).
SlowPeerTransport::~SlowPeerTransport() = default;

void SlowPeerTransport::AddHold(Hold hold) { rules_.push_back({std::move(hold), 0}); }

int64_t SlowPeerTransport::outstanding(int peer) const {
  auto it = outstanding_->find(peer);
  return it == outstanding_->end() ? 0 : it->second;
}

absl::StatusOr<std::unique_ptr<rdma::Endpoint>> SlowPeerTransport::Connect(
    const rdma::PeerInfo& peer) {
  absl::StatusOr<std::unique_ptr<rdma::Endpoint>> connected = inner().Connect(peer);
  if (!connected.ok()) return connected.status();
  auto state = std::make_shared<EndpointState>();
  state->peer = peer.rank;
  state->inner = std::shared_ptr<rdma::Endpoint>(*std::move(connected));
  return std::unique_ptr<rdma::Endpoint>(new SlowPeerEndpoint(*this, std::move(state)));
}

absl::StatusOr<int> SlowPeerTransport::Progress() {
  if (before_progress_) before_progress_();
  absl::StatusOr<int> fired = inner().Progress();
  if (!fired.ok()) return fired;
  int count = *fired;
  std::deque<std::pair<rdma::Completion, absl::Status>> due;
  due.swap(due_);
  for (auto& [done, status] : due) {
    std::move(done)(std::move(status));
    ++count;
  }
  return count;
}

void SlowPeerTransport::BeforePost(Op op, int peer) {
  const int64_t nth = ++posted_to_[peer];
  for (size_t r = 0; r < rules_.size(); ++r) {
    const Hold& hold = rules_[r].hold;
    if (!hold.release_before || !hold.release_before(op, peer, nth)) continue;
    ReleaseRule(static_cast<int>(r));
  }
}

void SlowPeerTransport::ReleaseAll() {
  for (size_t r = 0; r < rules_.size(); ++r) ReleaseRule(static_cast<int>(r));
}

void SlowPeerTransport::ReleaseRule(int rule) {
  std::vector<std::unique_ptr<HeldOp>> released;
  for (auto it = held_ops_.begin(); it != held_ops_.end();) {
    if ((*it)->rule == rule) {
      released.push_back(std::move(*it));
      it = held_ops_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& held : released) Release(*held);
}

int SlowPeerTransport::Decide(Op op, int peer, size_t length) {
  for (size_t r = 0; r < rules_.size(); ++r) {
    Rule& rule = rules_[r];
    if (rule.hold.op != op) continue;
    if (rule.hold.peer != -1 && rule.hold.peer != peer) continue;
    if (rule.hold.length != 0 && rule.hold.length != length) continue;
    const int64_t n = ++rule.seen;
    if (n < rule.hold.nth || n >= rule.hold.nth + rule.hold.count) continue;
    return static_cast<int>(r);
  }
  return -1;
}

void SlowPeerTransport::Release(HeldOp& op) {
  EndpointState& endpoint = *op.endpoint;
  --endpoint.held;
  if (endpoint.closed) ++landed_after_close_;
  const rdma::RemoteSlice remote{&op.remote, op.remote_offset, op.remote_length};
  // The inner endpoint stays open until the released operation completes
  // (closing it would cancel it). A post that fails never runs its
  // completion, which is still owed.
  ++endpoint.released;
  auto done = std::make_shared<rdma::Completion>(std::move(op.done));
  auto forward = [this, done, state = op.endpoint](absl::Status status) {
    --state->released;
    CloseInnerIfDone(*state);
    std::move(*done)(std::move(status));
  };
  absl::Status posted;
  switch (op.op) {
    case Op::kWrite:
      posted = endpoint.inner->PostWrite(op.local, remote, op.notification, forward);
      break;
    case Op::kRead:
      posted = endpoint.inner->PostRead(op.local, remote, forward);
      break;
    case Op::kFlush:
      posted = endpoint.inner->PostFlush(forward);
      break;
  }
  if (!posted.ok()) {
    --endpoint.released;
    FireLater(std::move(*done), posted);
  }
  CloseInnerIfDone(endpoint);
}

void SlowPeerTransport::CloseInnerIfDone(EndpointState& state) {
  if (!state.closed || state.held > 0 || state.released > 0 || state.inner_closed) return;
  state.inner_closed = true;
  state.inner->Close().IgnoreError();
}

void SlowPeerTransport::FireLater(rdma::Completion done, absl::Status status) {
  due_.emplace_back(std::move(done), std::move(status));
}

}  // namespace rdmaflow::strategies::testing
