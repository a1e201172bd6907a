#include "rdma/testing/faulty_transport.h"

#include <cstring>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace rdmaflow::rdma::testing {

// Wraps one endpoint of the inner transport.
class FaultyEndpoint final : public Endpoint {
 public:
  FaultyEndpoint(FaultyTransport& transport, std::unique_ptr<Endpoint> inner)
      : transport_(transport), inner_(std::move(inner)) {}
  ~FaultyEndpoint() override { Close().IgnoreError(); }

  int peer_rank() const override { return inner_->peer_rank(); }
  std::string Describe() const override { return inner_->Describe(); }

  absl::Status Prepare(const RemoteRegion& region) override {
    RETURN_IF_ERROR(inner_->Prepare(region));
    prepared_.insert(Identity(region));
    return absl::OkStatus();
  }

  absl::StatusOr<std::byte*> MapRemote(const RemoteSlice& remote) override {
    RETURN_IF_ERROR(CheckPrepared(remote));
    return inner_->MapRemote(remote);
  }

  absl::Status PostWrite(const LocalSlice& src, const RemoteSlice& dst,
                         std::optional<uint32_t> notification,
                         Completion done) override {
    RETURN_IF_ERROR(CheckPrepared(dst));
    const FaultyTransport::Fault* fault =
        transport_.Decide(FaultyTransport::Op::kWrite, peer_rank());
    if (fault != nullptr && fault->action == FaultyTransport::Action::kCorrupt &&
        fault->corrupt && src.length > 0) {
      // What lands is a corrupted copy, written from a region of our own.
      absl::StatusOr<MemoryRegion> copy = transport_.inner().Allocate(src.length);
      if (!copy.ok()) return copy.status();
      auto region = std::make_shared<MemoryRegion>(*std::move(copy));
      std::memcpy(region->data(), src.data(), src.length);
      fault->corrupt(dst.offset, absl::MakeSpan(region->data(), src.length));
      return inner_->PostWrite(
          {region.get(), 0, src.length}, dst, notification,
          [region, done = std::move(done)](absl::Status s) mutable {
            std::move(done)(s);
          });
    }
    if (fault != nullptr && fault->action == FaultyTransport::Action::kCorrupt) {
      fault = nullptr;
    }
    return Post(fault, std::move(done), [&](Completion wrapped) {
      return inner_->PostWrite(src, dst, notification, std::move(wrapped));
    });
  }

  absl::Status PostRead(const LocalSlice& dst, const RemoteSlice& src,
                        Completion done) override {
    RETURN_IF_ERROR(CheckPrepared(src));
    return Post(transport_.Decide(FaultyTransport::Op::kRead, peer_rank()),
                std::move(done), [&](Completion wrapped) {
                  return inner_->PostRead(dst, src, std::move(wrapped));
                });
  }

  absl::Status PostFlush(Completion done) override {
    return Post(transport_.Decide(FaultyTransport::Op::kFlush, peer_rank()),
                std::move(done), [&](Completion wrapped) {
                  return inner_->PostFlush(std::move(wrapped));
                });
  }

  absl::Status Close() override {
    absl::Status closed = inner_->Close();
    // Dropped completions end as a closed endpoint's operations do: once,
    // with kCancelled, from a later Progress().
    for (auto& dropped : *dropped_) {
      if (dropped) {
        transport_.Hold(std::move(dropped),
                        absl::CancelledError("endpoint closed (dropped by a fault)"), 0);
      }
    }
    dropped_->clear();
    return closed;
  }

 private:
  // A region as a backend would cache its key: by owner, address and key.
  static std::string Identity(const RemoteRegion& region) {
    return absl::StrCat(region.owner_rank, "/", region.address, "/", region.length, "/",
                        region.packed_key);
  }

  absl::Status CheckPrepared(const RemoteSlice& remote) const {
    if (!transport_.require_prepare_ || remote.region == nullptr ||
        prepared_.contains(Identity(*remote.region))) {
      return absl::OkStatus();
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "a post to rank ", peer_rank(), "'s region at 0x", absl::Hex(remote.region->address),
        " that was never passed to Prepare() (UCX would unpack its key only now, after "
        "the peer may have let it go)"));
  }

  template <typename PostFn>
  absl::Status Post(const FaultyTransport::Fault* fault, Completion done, PostFn post) {
    using Action = FaultyTransport::Action;
    if (fault == nullptr) return post(std::move(done));
    switch (fault->action) {
      case Action::kFail:
      case Action::kKillPeer:
        transport_.Hold(std::move(done), fault->status, 0);
        return absl::OkStatus();
      case Action::kDelay:
        return post([transport = &transport_, delay = fault->delay_progress,
                     done = std::move(done)](absl::Status s) mutable {
          transport->Hold(std::move(done), std::move(s), delay);
        });
      case Action::kDrop:
        // The caller's completion waits for Close(); the real one is ignored.
        dropped_->push_back(std::move(done));
        return post([](absl::Status) {});
      case Action::kCorrupt:
        break;
    }
    return post(std::move(done));
  }

  FaultyTransport& transport_;
  absl::flat_hash_set<std::string> prepared_;
  std::unique_ptr<Endpoint> inner_;
  std::unique_ptr<std::vector<Completion>> dropped_ =
      std::make_unique<std::vector<Completion>>();
};

Capabilities FaultyTransport::capabilities() const {
  Capabilities caps = inner().capabilities();
  caps.description = absl::StrCat("faulty(", caps.description, ")");
  // Its endpoints inject no faults into flagged writes: they have none.
  caps.flag_writes = false;
  return caps;
}

void FaultyTransport::AddFault(Fault fault) { rules_.push_back({std::move(fault), 0}); }

absl::StatusOr<std::unique_ptr<Endpoint>> FaultyTransport::Connect(const PeerInfo& peer) {
  absl::StatusOr<std::unique_ptr<Endpoint>> connected = inner().Connect(peer);
  if (!connected.ok()) return connected.status();
  return std::make_unique<FaultyEndpoint>(*this, *std::move(connected));
}

const FaultyTransport::Fault* FaultyTransport::Decide(Op op, int peer) {
  for (Rule& rule : rules_) {
    const Fault& f = rule.fault;
    if (f.op != Op::kAny && f.op != op) continue;
    if (f.peer != -1 && f.peer != peer) continue;
    const int64_t n = ++rule.seen;
    const bool forever = f.count < 0 || f.action == Action::kKillPeer;
    if (n < f.nth || (!forever && n >= f.nth + f.count)) continue;
    ++injected_;
    return &f;
  }
  return nullptr;
}

void FaultyTransport::Hold(Completion done, absl::Status status, int progress) {
  held_.push_back({progress, std::move(done), std::move(status)});
}

absl::StatusOr<int> FaultyTransport::Progress() {
  absl::StatusOr<int> fired = inner().Progress();
  if (!fired.ok()) return fired;
  int count = *fired;
  // Those due now fire; a completion may hold another (for the next pass).
  std::deque<Held> due;
  for (auto it = held_.begin(); it != held_.end();) {
    if (it->progress_left-- <= 0) {
      due.push_back(std::move(*it));
      it = held_.erase(it);
    } else {
      ++it;
    }
  }
  for (Held& held : due) {
    std::move(held.done)(std::move(held.status));
    ++count;
  }
  return count;
}

}  // namespace rdmaflow::rdma::testing
