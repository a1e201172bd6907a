// File: peer_links.cc
#include "onesided/links/peer_links.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/annotate.h"
#include "common/status_macros.h"
#include "rdma/blocking.h"
#include "rdma/rendezvous.h"

namespace rdmaflow::onesided {
namespace {

// <scope>/<rank>/<what>, or <scope>/<rank> for a scope's unnamed region.
std::string Key(absl::string_view scope, int rank, absl::string_view what) {
  if (what.empty()) return absl::StrCat(scope, "/", rank);
  return absl::StrCat(scope, "/", rank, "/", what);
}

}  // namespace

absl::Status CheckRegionBytes(const rdma::RemoteRegion& region, uint64_t bytes,
                              absl::string_view name, absl::string_view what) {
  if (region.length >= bytes) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      what, ": rank ", region.owner_rank, " published ", name, " of ", region.length,
      " bytes where ", bytes, " are needed (a forged record, or another build)"));
}

absl::StatusOr<OwnLinks> MakeOwnLinks(rdma::Transport& transport, rdma::Store& store,
                                      const std::string& ns, ProgressLoop* loop,
                                      const ProgressLoopOptions& loop_options,
                                      absl::Duration timeout, absl::string_view what) {
  OwnLinks own;
  if (loop == nullptr) {
    if (absl::Status valid = loop_options.Validate(); !valid.ok()) {
      return Annotate(valid, what);
    }
    own.loop = std::make_unique<ProgressLoop>(transport, loop_options);
    loop = own.loop.get();
  } else if (!loop->OnLoopThread()) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": its progress loop belongs to another thread (docs/thread_model.md)"));
  }
  PeerLinksOptions options;
  if (timeout > absl::ZeroDuration()) options.timeout = timeout;
  ASSIGN_OR_RETURN(own.links, PeerLinks::Create(transport, store, ns, *loop, options));
  return own;
}

absl::StatusOr<std::unique_ptr<PeerLinks>> PeerLinks::Create(
    rdma::Transport& transport, rdma::Store& store, std::string ns, ProgressLoop& loop,
    const PeerLinksOptions& options) {
  const std::string what = absl::StrCat("the links of rank ", transport.rank());
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": timeout must be positive, not ", absl::FormatDuration(options.timeout)));
  }
  if (&loop.transport() != &transport) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": the progress loop drives another transport"));
  }
  if (!loop.OnLoopThread()) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": its progress loop belongs to another thread (docs/thread_model.md)"));
  }
  if (absl::Status published = rdma::PublishAddress(store, ns, transport); !published.ok()) {
    return Annotate(published, absl::StrCat(what, ": publishing the transport's address"));
  }
  return std::unique_ptr<PeerLinks>(
      new PeerLinks(transport, store, std::move(ns), loop, options));
}

PeerLinks::PeerLinks(rdma::Transport& transport, rdma::Store& store, std::string ns,
                     ProgressLoop& loop, const PeerLinksOptions& options)
    : transport_(transport),
      store_(store),
      ns_(std::move(ns)),
      loop_(loop),
      options_(options) {}

PeerLinks::~PeerLinks() {
  // Off the loop's thread only while the loop's owner tears everything down
  // (a protocol that made its own loop): the loop goes next, watches and all.
  const bool on_thread = loop_.OnLoopThread();
  for (auto& [rank, peer] : peers_) {
    if (peer.watch != 0 && on_thread) loop_.Unwatch(peer.watch);
    for (auto& lane : peer.lanes) {
      if (lane != nullptr) lane->Close().IgnoreError();
    }
  }
}

std::string PeerLinks::StoreKey(absl::string_view scope, int rank,
                                absl::string_view what) const {
  return absl::StrCat(ns_, "/", Key(scope, rank, what));
}

void PeerLinks::CheckThread(const char* method) const {
  loop_.CheckOnLoopThread(absl::StrCat("PeerLinks::", method));
}

absl::Status PeerLinks::Publish(const RegionSet& ours) {
  CheckThread("Publish");
  if (ours.scope == "address") {
    return absl::InvalidArgumentError(
        "the links' scope \"address\" holds the transports' addresses: pick another");
  }
  const int rank = transport_.rank();
  RETURN_IF_ERROR(store_.Set(StoreKey(ours.scope, rank, "layout"), ours.layout));
  for (const auto& [name, region] : ours.regions) {
    RETURN_IF_ERROR(
        rdma::PublishRegion(store_, ns_, Key(ours.scope, rank, name), region->descriptor()));
  }
  return absl::OkStatus();
}

absl::StatusOr<PeerRegions> PeerLinks::Fetch(const RegionSet& ours, int peer,
                                             absl::string_view what) {
  CheckThread("Fetch");
  RETURN_IF_ERROR(rdma::CheckPeerLayout(store_, ns_, Key(ours.scope, peer, "layout"),
                                        ours.layout, peer, options_.timeout, what));
  PeerRegions fetched;
  fetched.rank = peer;
  for (const auto& [name, region] : ours.regions) {
    absl::StatusOr<rdma::RemoteRegion> remote =
        rdma::FetchRegion(store_, ns_, Key(ours.scope, peer, name), options_.timeout);
    if (!remote.ok()) {
      return Annotate(remote.status(),
                      name.empty() ? absl::StrCat(what, ": rank ", peer, "'s region")
                                   : absl::StrCat(what, ": rank ", peer, "'s region '", name,
                                                  "'"));
    }
    fetched.regions.push_back(*std::move(remote));
  }
  return fetched;
}

absl::StatusOr<std::vector<PeerRegions>> PeerLinks::Exchange(const RegionSet& ours,
                                                             absl::Span<const int> peers,
                                                             absl::string_view what) {
  CheckThread("Exchange");
  RETURN_IF_ERROR(Publish(ours));
  const int rank = transport_.rank();
  std::vector<PeerRegions> theirs;
  for (int peer : peers) {
    if (peer == rank || std::any_of(theirs.begin(), theirs.end(),
                                    [&](const PeerRegions& p) { return p.rank == peer; })) {
      continue;
    }
    ASSIGN_OR_RETURN(PeerRegions fetched, Fetch(ours, peer, what));
    theirs.push_back(std::move(fetched));
  }
  return theirs;
}

absl::StatusOr<rdma::Endpoint*> PeerLinks::Lane(int peer, LaneKind lane) {
  CheckThread("Lane");
  if (peer < 0 || peer == transport_.rank()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", transport_.rank(), " has no link to rank ", peer));
  }
  Peer& state = peers_[peer];
  if (!state.status.ok()) return state.status;
  std::unique_ptr<rdma::Endpoint>& endpoint = state.lanes[static_cast<int>(lane)];
  if (endpoint == nullptr) {
    ASSIGN_OR_RETURN(endpoint,
                     rdma::ConnectToPeer(transport_, store_, ns_, peer, options_.timeout));
    ++stats_.endpoints;
  }
  return endpoint.get();
}

absl::StatusOr<int64_t> PeerLinks::Subscribe(int peer, PeerFailed on_failure) {
  CheckThread("Subscribe");
  ASSIGN_OR_RETURN(rdma::Endpoint* data, Lane(peer));
  Peer& state = peers_[peer];
  if (state.watch == 0) {
    state.watch = loop_.WatchPeer(
        peer, data, [this](int rank, const absl::Status& status) { Notify(rank, status); });
    ++stats_.watches;
  }
  const int64_t id = next_subscriber_++;
  subscribers_[id] = Subscriber{peer, std::move(on_failure)};
  ++stats_.subscriptions;
  return id;
}

void PeerLinks::Unsubscribe(int64_t id) { subscribers_.erase(id); }

void PeerLinks::Rearm(int peer) {
  CheckThread("Rearm");
  auto it = peers_.find(peer);
  if (it != peers_.end() && it->second.watch != 0) loop_.Rearm(it->second.watch);
}

absl::Status PeerLinks::PeerStatus(int peer) const {
  auto it = peers_.find(peer);
  return it == peers_.end() ? absl::OkStatus() : it->second.status;
}

void PeerLinks::Notify(int peer, const absl::Status& status) {
  // A callback may unsubscribe others (or itself): call from a snapshot of
  // ids, skipping those gone meanwhile.
  std::vector<int64_t> ids;
  for (const auto& [id, subscriber] : subscribers_) {
    if (subscriber.peer == peer) ids.push_back(id);
  }
  for (int64_t id : ids) {
    auto it = subscribers_.find(id);
    if (it == subscribers_.end()) continue;
    PeerFailed callback = it->second.on_failure;  // outlives an unsubscribe inside it
    if (callback) callback(peer, status);
  }
}

void PeerLinks::Sever(int peer, const absl::Status& why) {
  // Unchecked, like Fence(): a protocol's destructor may sever while the
  // loop's owner tears down.
  Peer& state = peers_[peer];
  if (!state.status.ok()) return;
  state.status = why.ok() ? absl::UnavailableError("severed") : why;
  if (state.watch != 0 && loop_.OnLoopThread()) {
    loop_.Unwatch(state.watch);
    state.watch = 0;
  }
  // Closing cancels what is posted; the endpoints stay allocated until the
  // links go, so a protocol's pointer to one stays valid (and fails).
  for (auto& lane : state.lanes) {
    if (lane != nullptr) lane->Close().IgnoreError();
  }
  ++stats_.severed;
  Notify(peer, state.status);
}

bool PeerLinks::Fence(absl::Span<const int> peers, absl::FunctionRef<bool()> done,
                      absl::Time deadline, absl::string_view why) {
  if (done()) return true;
  // Half the time for the operations to complete on their own: they take
  // microseconds on a working link, and the peer's side need not progress
  // on RDMA or shared memory (over TCP it must, and a peer busy elsewhere
  // may take a while). A link that has not delivered them by then is hung
  // or gone, and severing it hurts every protocol on it: so not sooner.
  const absl::Time now = absl::Now();
  loop_.Drain(done, deadline > now ? now + (deadline - now) / 2 : now).IgnoreError();
  if (done()) return true;
  for (int peer : peers) {
    Sever(peer, absl::UnavailableError(absl::StrCat(
                    "the links of rank ", transport_.rank(), " to rank ", peer,
                    " were closed: ", why, " and operations to it had not completed")));
  }
  // A closed endpoint's cancellations get their grace (rdma/blocking.h)
  // whatever was left of the deadline.
  loop_.Drain(done, std::max(deadline, absl::Now() + rdma::kCancelGrace)).IgnoreError();
  return done();
}

onesided::Fence PeerLinks::FenceOn(int peer, std::string why) {
  return [this, peer, why = std::move(why)](absl::FunctionRef<bool()> finished) {
    const bool was_severed = !PeerStatus(peer).ok();
    const int peers[] = {peer};
    Fence(peers, finished, absl::Now() + rdma::kCancelGrace, why);
    const bool severed = !was_severed && !PeerStatus(peer).ok();
    return absl::StrCat("fenced rank ", peer, " on the links",
                        severed ? " (severed there while it waited, for every protocol on "
                                  "the links)"
                                : "");
  };
}

}  // namespace rdmaflow::onesided
