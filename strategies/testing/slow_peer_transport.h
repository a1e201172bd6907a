// File: testing/slow_peer_transport.h
// -----------------------------------------------------------------------------
// SlowPeerTransport: a Transport decorator for the strategies' slow-peer
// tests. Where rdma/testing/faulty_transport.h delays or drops an
// operation's *completion* (its bytes have moved already), this one holds
// the operation itself: a held read or write is not handed to the inner
// transport, so its bytes move only when it is released, possibly long
// after the poster gave up (a peer, or a fabric, slower than the timeout).
//
//   SlowPeerTransport slow(transport);
//   SlowPeerTransport::Hold hold;
//   hold.op = SlowPeerTransport::Op::kRead;
//   hold.peer = 1;
//   hold.nth = 2;  // our second read from rank 1 is held...
//   hold.release_before = [](SlowPeerTransport::Op op, int peer, int64_t nth) {
//     return peer == 2 && nth == 3;  // ...until our third operation to rank 2
//   };
//   slow.AddHold(hold);
//
// Closing the endpoint of a held operation ends it as Endpoint::Close()
// promises, with kCancelled from the next Progress() and nothing moved,
// unless the hold says `survives_close`: then the operation stays held and,
// when released, still moves its bytes and completes (a backend whose
// cancellation has not caught up with the operation: the case the blocking
// helpers report as "did not end"). The inner endpoint is closed once no
// held operation needs it.
//
// It also counts, per peer, the operations posted through it whose
// completion has not fired yet, and runs an optional hook before each
// Progress() (a test may block there: a rank that stalls).
//
// Thread-compatible, like the transport it wraps, which must outlive it.
#ifndef RDMAFLOW_STRATEGIES_TESTING_SLOW_PEER_TRANSPORT_H_
#define RDMAFLOW_STRATEGIES_TESTING_SLOW_PEER_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rdma/endpoint.h"
#include "rdma/testing/transport_wrapper.h"
#include "rdma/transport.h"

namespace rdmaflow::strategies::testing {

class SlowPeerTransport final : public rdma::testing::TransportWrapper {
 public:
  enum class Op { kWrite, kRead, kFlush };
  struct Hold {
    Op op = Op::kRead;
    int peer = -1;      // -1: any peer
    size_t length = 0;  // only operations moving this many bytes; 0: any
    int64_t nth = 1;    // the first matching operation held (1-based)
    int64_t count = 1;  // how many from there on
    // Called before each operation is posted through this transport, with
    // its kind, peer and number among the operations to that peer
    // (1-based); true releases everything this hold holds first, so the
    // released operations execute before that one. Null: never released.
    std::function<bool(Op op, int peer, int64_t nth_to_peer)> release_before;
    bool survives_close = false;
  };

  explicit SlowPeerTransport(rdma::Transport& inner);
  ~SlowPeerTransport() override;

  // The inner transport's, without flagged writes (its endpoints hold no
  // such operation).
  rdma::Capabilities capabilities() const override {
    rdma::Capabilities caps = inner().capabilities();
    caps.flag_writes = false;
    return caps;
  }

  void AddHold(Hold hold);
  // Releases everything held now (from the posting thread, e.g. in the
  // SetBeforeProgress hook): a peer that was slow, not gone.
  void ReleaseAll();
  // Runs before every Progress() on the calling thread.
  void SetBeforeProgress(std::function<void()> hook) { before_progress_ = std::move(hook); }

  // Operations held so far, and those that moved their bytes after the
  // poster had closed the endpoint.
  int64_t held() const { return held_count_; }
  int64_t landed_after_close() const { return landed_after_close_; }
  // Operations towards `peer` posted through this transport whose
  // completion has not fired yet.
  int64_t outstanding(int peer) const;

  absl::StatusOr<std::unique_ptr<rdma::Endpoint>> Connect(const rdma::PeerInfo& peer) override;
  absl::StatusOr<int> Progress() override;

 private:
  friend class SlowPeerEndpoint;
  struct Rule {
    Hold hold;
    int64_t seen = 0;
  };
  struct EndpointState;
  struct HeldOp;

  // Before an operation of `op` towards `peer` is posted: counts it, and
  // releases what a rule's release_before asks for.
  void BeforePost(Op op, int peer);
  // The index of the rule that holds the next `op` of `length` bytes
  // towards `peer`, or -1.
  int Decide(Op op, int peer, size_t length);
  // Releases what rule `rule` holds, in order.
  void ReleaseRule(int rule);
  // Hands a held operation to the inner endpoint.
  void Release(HeldOp& op);
  // Closes the inner endpoint of `state` once nothing held needs it.
  void CloseInnerIfDone(EndpointState& state);
  // Completions owed with a status, fired from the next Progress().
  void FireLater(rdma::Completion done, absl::Status status);

  std::vector<Rule> rules_;
  std::vector<std::unique_ptr<HeldOp>> held_ops_;
  std::function<void()> before_progress_;
  std::deque<std::pair<rdma::Completion, absl::Status>> due_;
  std::map<int, int64_t> posted_to_;  // by peer
  // Shared with the wrapped completions, which may outlive an endpoint.
  std::shared_ptr<std::map<int, int64_t>> outstanding_ =
      std::make_shared<std::map<int, int64_t>>();
  int64_t held_count_ = 0;
  int64_t landed_after_close_ = 0;
};

}  // namespace rdmaflow::strategies::testing

#endif  // RDMAFLOW_STRATEGIES_TESTING_SLOW_PEER_TRANSPORT_H_
