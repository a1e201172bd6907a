// File: testing/faulty_transport.h
// -----------------------------------------------------------------------------
// FaultyTransport: a Transport decorator that injects faults into the
// operations of a real backend, for tests of the components above rdma/
// (leveldb's ErrorEnv over EnvWrapper). Each Fault picks operations by kind
// and peer, counts them, and from the `nth` matching one on (for `count`
// operations, or forever) does one of:
//
//   kFail:     the operation is not posted; its completion fires with
//              `status` from the next Progress() (never inline).
//   kDelay:    posted; its completion is held back for `delay_progress`
//              further Progress() calls.
//   kDrop:     posted; its completion never fires until the endpoint is
//              closed (then kCancelled): a peer that stopped answering.
//   kCorrupt:  (writes) what lands at the peer is `corrupt` applied to a
//              copy of the source: a peer that writes garbage.
//   kKillPeer: this and every later operation towards the peer fails with
//              kUnavailable, as if the peer had died.
//
//   FaultyTransport faulty(transport);
//   FaultyTransport::Fault kill;
//   kill.peer = 1;
//   kill.nth = 3;  // rank 1 dies at our third operation towards it
//   kill.action = FaultyTransport::Action::kKillPeer;
//   faulty.AddFault(kill);
//   // ... give `faulty` to the component under test.
//
// Thread-compatible, like the transport it wraps, which must outlive it.
#ifndef RDMAFLOW_RDMA_TESTING_FAULTY_TRANSPORT_H_
#define RDMAFLOW_RDMA_TESTING_FAULTY_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "rdma/endpoint.h"
#include "rdma/testing/transport_wrapper.h"
#include "rdma/transport.h"

namespace rdmaflow::rdma::testing {

class FaultyTransport final : public TransportWrapper {
 public:
  enum class Op { kAny, kWrite, kRead, kFlush };
  enum class Action { kFail, kDelay, kDrop, kCorrupt, kKillPeer };
  struct Fault {
    Op op = Op::kAny;
    int peer = -1;       // -1: any peer
    int64_t nth = 1;     // the first matching operation affected (1-based)
    int64_t count = 1;   // how many from there on; -1: all
    Action action = Action::kFail;
    absl::Status status = absl::UnavailableError("injected fault");
    int delay_progress = 0;  // kDelay
    // kCorrupt: called with the offset of the written bytes in the peer's
    // region and a copy of them, which it may change.
    std::function<void(uint64_t offset, absl::Span<std::byte> bytes)> corrupt;
  };

  explicit FaultyTransport(Transport& inner) : TransportWrapper(inner) {}

  void AddFault(Fault fault);
  // From now on, a write or read to a remote region that was not first
  // passed to the endpoint's Prepare() fails to post (kFailedPrecondition):
  // the fault UCX 1.13 turns into a crash when the peer has let the region
  // go before the first post (Endpoint::Prepare). Prepare() and MapRemote()
  // are forwarded to the backend either way.
  void require_prepare() { require_prepare_ = true; }
  // Operations a fault has affected so far.
  int64_t injected() const { return injected_; }

  Capabilities capabilities() const override;
  absl::StatusOr<std::unique_ptr<Endpoint>> Connect(const PeerInfo& peer) override;
  absl::StatusOr<int> Progress() override;

 private:
  friend class FaultyEndpoint;
  struct Rule {
    Fault fault;
    int64_t seen = 0;
  };
  struct Held {
    int progress_left;
    Completion done;
    absl::Status status;
  };

  // The fault that applies to the next operation of `op` towards `peer`.
  const Fault* Decide(Op op, int peer);
  // Fires `done` with `status` after `progress` more Progress() calls.
  void Hold(Completion done, absl::Status status, int progress);

  std::vector<Rule> rules_;
  std::deque<Held> held_;
  int64_t injected_ = 0;
  bool require_prepare_ = false;
};

}  // namespace rdmaflow::rdma::testing

#endif  // RDMAFLOW_RDMA_TESTING_FAULTY_TRANSPORT_H_
