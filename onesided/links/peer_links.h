// File: peer_links.h
// -----------------------------------------------------------------------------
// PeerLinks: a job's connections on one transport, shared by every protocol
// that runs over it (the Messenger, the ring and host all-reduce in the c10d
// backend). Protocols used to bootstrap themselves: each published the
// transport's address, connected its own endpoint to each peer and had the
// progress loop watch it. With links, per (transport, store, namespace):
//
//   - the address is published once, when the links are created;
//   - each peer gets one endpoint (its data lane), connected on first use,
//     and a second one (its control lane) only for a protocol that asks: a
//     credit that must not queue behind its own side's data on a transport
//     that delivers in order (the ring, over UCX's TCP);
//   - each peer gets one liveness watch on the progress loop, on its data
//     lane, whatever the number of protocols that use it; a failed probe is
//     reported to every protocol subscribed to the peer;
//   - a protocol publishes its regions and the options every rank must share
//     (its layout) and fetches a peer's in one typed call, Exchange().
//
// Store keys (under the links' namespace, so that the records of a protocol
// stay where they were when it connected itself):
//   <ns>/address/<rank>                  rdma/rendezvous.h's address record
//   <ns>/<scope>/<rank>/layout           a protocol's layout (plain text)
//   <ns>/<scope>/<rank>/<region name>    its region descriptors (proven)
//   <ns>/<scope>/<rank>                  a region without a name
//
// Endpoints stay the links'. A protocol that gives up on operations it
// posted fences them with Fence(): it waits for them half the time it has,
// then severs the peers they went to (their endpoints close, which cancels
// what is still posted, and every protocol subscribed to them hears of it)
// and waits again. So a protocol never closes an endpoint another one uses
// while that endpoint works. The watch is shared too: Rearm() says "heard
// from the peer" for every protocol on the links.
//
// Thread model: the links belong to their progress loop's thread. Create,
// Exchange, Publish, Fetch, Lane, Subscribe and Rearm check it (ProgressLoop::
// CheckOnLoopThread); Sever, Fence, Unsubscribe, PeerStatus and the
// destructor do not, since protocols call them from their destructors
// while the loop's owner tears down (like ProgressLoop::Drain). The loop,
// transport and store must outlive the links, and the links every protocol
// created on them. Exchange() and a first Lane() wait up to the links'
// timeout, not a protocol's.
//
//   ASSIGN_OR_RETURN(auto links, PeerLinks::Create(transport, store, "job", loop, {}));
//   ASSIGN_OR_RETURN(auto peers, links->Exchange(
//       {"ring/x", layout, {{"data", &data}, {"control", &control}}}, {left, right},
//       "ring 'x'"));
//   ASSIGN_OR_RETURN(rdma::Endpoint* right_lane, links->Lane(right));
//   int64_t watch = links->Subscribe(right, [&](int peer, absl::Status s) { ... });
#ifndef RDMAFLOW_ONESIDED_LINKS_PEER_LINKS_H_
#define RDMAFLOW_ONESIDED_LINKS_PEER_LINKS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "onesided/progress/progress_loop.h"
#include "onesided/progress/waits.h"
#include "rdma/endpoint.h"
#include "rdma/memory_region.h"
#include "rdma/remote_region.h"
#include "rdma/store.h"
#include "rdma/transport.h"

namespace rdmaflow::onesided {

// Which of a peer's endpoints: the data lane is the one every protocol
// shares and the one the liveness watch probes.
enum class LaneKind { kData, kControl };

// What one protocol instance publishes: its store scope ("ring/c10d"), the
// description of the options every rank must create it with, and its
// regions by name (an empty name: the scope's one region, keyed
// <ns>/<scope>/<rank>, as the Mailbox's inbox).
struct RegionSet {
  std::string scope;
  std::string layout;
  std::vector<std::pair<std::string, const rdma::MemoryRegion*>> regions;
};

// A peer's regions, in the order of the RegionSet's names.
struct PeerRegions {
  int rank = -1;
  std::vector<rdma::RemoteRegion> regions;
};

struct PeerLinksOptions {
  // How long Exchange() and a first Lane() wait for a peer's records.
  absl::Duration timeout = absl::Seconds(120);
};

// The counters a backend reports (docs/onesided.md): what the links cost.
struct PeerLinksStats {
  int64_t endpoints = 0;       // connected, both lanes, over the links' life
  int64_t watches = 0;         // liveness watches registered on the loop
  int64_t subscriptions = 0;   // protocols' subscriptions, over the links' life
  int64_t severed = 0;         // peers severed (Sever(), Fence())
};

class PeerLinks;

// Links (and, when the caller has none, a progress loop) that one protocol
// owns: what the Create() without links of the Messenger, the ring, the
// host all-reduce and AllReduceGroup make for a protocol alone on its
// transport. Destroyed links first, then the loop.
struct OwnLinks {
  std::unique_ptr<ProgressLoop> loop;  // null when the caller's is used
  std::unique_ptr<PeerLinks> links;
};

// A fetched region must hold what the protocol will write or read there:
// kDataLoss "<what>: rank <owner> published <name> of <length> bytes where
// <bytes> are needed (...)" otherwise. Checked at set-up, so that a short
// region (a forged record, another build) is refused naming its owner, not
// at the first post.
absl::Status CheckRegionBytes(const rdma::RemoteRegion& region, uint64_t bytes,
                              absl::string_view name, absl::string_view what);

// Makes OwnLinks on `loop`, or on a loop of its own with `loop_options`
// when `loop` is null (then the calling thread owns it). `what` names the
// protocol in messages. kInvalidArgument for invalid loop options or
// timeout; kFailedPrecondition for a loop of another thread; the store's
// error.
absl::StatusOr<OwnLinks> MakeOwnLinks(rdma::Transport& transport, rdma::Store& store,
                                      const std::string& ns, ProgressLoop* loop,
                                      const ProgressLoopOptions& loop_options,
                                      absl::Duration timeout, absl::string_view what);

// Single-thread (the loop's); not copyable.
class PeerLinks {
 public:
  // A probe of `peer` (or a Sever() of it) failed with `status`.
  using PeerFailed = std::function<void(int peer, const absl::Status& status)>;

  // Publishes `transport`'s address under `ns`. Must run on `loop`'s thread;
  // `loop` must drive `transport`. kInvalidArgument for bad options;
  // kFailedPrecondition off the loop's thread or for a loop of another
  // transport; the store's error.
  static absl::StatusOr<std::unique_ptr<PeerLinks>> Create(
      rdma::Transport& transport, rdma::Store& store, std::string ns, ProgressLoop& loop,
      const PeerLinksOptions& options);
  // Ends the watches and closes the endpoints: every protocol created on the
  // links must be gone (it fenced what it posted).
  ~PeerLinks();

  PeerLinks(const PeerLinks&) = delete;
  PeerLinks& operator=(const PeerLinks&) = delete;

  rdma::Transport& transport() const { return transport_; }
  rdma::Store& store() const { return store_; }
  const std::string& ns() const { return ns_; }
  ProgressLoop& loop() const { return loop_; }
  int rank() const { return transport_.rank(); }
  const PeerLinksOptions& options() const { return options_; }
  const PeerLinksStats& stats() const { return stats_; }
  // The store key of a protocol's record: <ns>/<scope>/<rank>/<what>, as
  // Exchange() writes its layout and regions (for a protocol's own further
  // records, e.g. the host all-reduce's verdict).
  std::string StoreKey(absl::string_view scope, int rank, absl::string_view what) const;

  // Publishes `ours` (layout first, then each region), then, for each of
  // `peers` (this rank and repeats skipped), waits for its layout of the
  // same scope, compares it with ours, and fetches its regions of the same
  // names. `what` names the protocol in messages ("all-reduce 'c10d' on rank
  // 0"). kDeadlineExceeded naming a peer that never joined;
  // kFailedPrecondition quoting both layouts when they differ;
  // kPermissionDenied/kInvalidArgument for a record not published with this
  // job's token or that does not parse (rdma/rendezvous.h).
  absl::StatusOr<std::vector<PeerRegions>> Exchange(const RegionSet& ours,
                                                    absl::Span<const int> peers,
                                                    absl::string_view what);
  // Exchange() in two halves, for a protocol that publishes once and meets
  // its peers one at a time (the Mailbox): Publish() writes `ours`;
  // Fetch() checks `peer`'s layout against ours.layout and fetches its
  // regions of ours' names (only the names are read: a protocol whose two
  // ends publish different regions under one scope, as the executor's
  // receiver and sender, names the peer's with null regions).
  // Exchange()'s errors; kInvalidArgument for the scope "address" (the
  // transport's address records).
  absl::Status Publish(const RegionSet& ours);
  absl::StatusOr<PeerRegions> Fetch(const RegionSet& ours, int peer, absl::string_view what);

  // The endpoint to `peer` on `lane`, connected on first use (it waits up
  // to the timeout for the peer's address). The links keep it; it stays
  // valid until they go. The peer's failure once severed.
  absl::StatusOr<rdma::Endpoint*> Lane(int peer, LaneKind lane = LaneKind::kData);

  // Liveness. The first subscription to a peer connects its data lane (if
  // not yet) and has the loop watch it; `on_failure` then hears every
  // failed probe of it, on the loop's thread. Returns an id for
  // Unsubscribe(), or the Lane() error.
  absl::StatusOr<int64_t> Subscribe(int peer, PeerFailed on_failure);
  void Unsubscribe(int64_t id);
  // The subscriber heard from `peer`: its watch's next probe waits a full
  // liveness interval (ProgressLoop::Rearm).
  void Rearm(int peer);
  // OK, or why `peer` was severed.
  absl::Status PeerStatus(int peer) const;

  // Closes `peer`'s endpoints (what is posted on them is cancelled, and
  // memory mapped through them is unmapped) and tells its subscribers
  // `why`. Lane() answers `why` from then on.
  void Sever(int peer, const absl::Status& why);

  // A protocol's teardown or give-up: drives the loop's completions (Drain)
  // until `done()` (its operations have completed), for half the time to
  // `deadline`; then severs every peer of `peers` (kUnavailable naming
  // `why`) and drains again until `deadline`, or for rdma::kCancelGrace
  // after the sever if that is later (the closed endpoints' cancellations).
  // Returns true once `done()`.
  bool Fence(absl::Span<const int> peers, absl::FunctionRef<bool()> done,
             absl::Time deadline, absl::string_view why);
  // How a protocol's blocking write, read or flush on the lane to `peer`
  // (progress/waits.h) is ended when its wait gives up: Fence() on that peer
  // within rdma::kCancelGrace, so the operation is waited for and the peer
  // severed only if it hangs, never the lane closed under the others. `why`
  // says who gave up ("mailbox of rank 0 gave up a send to rank 1"). The
  // links must outlive the fence.
  onesided::Fence FenceOn(int peer, std::string why);

 private:
  struct Peer {
    std::unique_ptr<rdma::Endpoint> lanes[2];
    int64_t watch = 0;  // the loop's, 0 when none
    absl::Status status;
  };
  struct Subscriber {
    int peer;
    PeerFailed on_failure;
  };

  PeerLinks(rdma::Transport& transport, rdma::Store& store, std::string ns,
            ProgressLoop& loop, const PeerLinksOptions& options);
  void CheckThread(const char* method) const;
  void Notify(int peer, const absl::Status& status);

  rdma::Transport& transport_;
  rdma::Store& store_;
  const std::string ns_;
  ProgressLoop& loop_;
  const PeerLinksOptions options_;
  std::map<int, Peer> peers_;
  std::map<int64_t, Subscriber> subscribers_;
  int64_t next_subscriber_ = 1;
  PeerLinksStats stats_;
};

}  // namespace rdmaflow::onesided

#endif  // RDMAFLOW_ONESIDED_LINKS_PEER_LINKS_H_
