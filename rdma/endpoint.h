// File: endpoint.h
// -----------------------------------------------------------------------------
// Endpoint: the data plane towards one peer. One-sided writes (optionally
// followed by a 32-bit notification delivered to the peer), one-sided reads,
// and flushes, all non-blocking, all completing through callbacks that the
// owning Transport fires from Transport::Progress().
#ifndef RDMAFLOW_RDMA_ENDPOINT_H_
#define RDMAFLOW_RDMA_ENDPOINT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rdma/slice.h"

namespace rdmaflow::rdma {

// Called exactly once per accepted operation, from Transport::Progress()
// (or DeviceTransport::CloseMappings(), which first finishes the copies
// that ended) on the thread that drives the transport, never inline from
// Post*() and never under a backend lock. It may post, connect, close or
// destroy endpoints (its own included) and call Progress() again; every
// other operation still completes exactly once. Whatever the status, the
// operation's local memory is the caller's again when it fires: nothing of
// it is read or written after. OK, or the operation's error (see
// docs/rdma.md):
// kUnavailable (peer died or unreachable), kCancelled (endpoint closed),
// kPermissionDenied (stale or foreign remote key), kInternal (backend bug).
using Completion = absl::AnyInvocable<void(absl::Status) &&>;

class BoundFlaggedWrite;
class BoundRead;

// A connection to one peer, created by Transport::Connect(). The Transport
// must outlive it. Thread-compatible: one thread posts at a time, and it is
// the thread that calls Transport::Progress().
//
// Every Post*() either returns OK and later runs `done` exactly once, or
// returns an error and never runs `done`:
//   kInvalidArgument / kOutOfRange: bad slices (see CheckTransfer); nothing is
//     posted, so an out-of-bounds access never reaches the fabric.
//   kResourceExhausted: too many operations in flight on this endpoint;
//     progress the transport and retry (back-pressure, never blocking).
//   kUnavailable: the peer has failed; the message names it.
//   kFailedPrecondition: the endpoint is closed.
class Endpoint {
 public:
  virtual ~Endpoint() = default;

  // Rank of the peer.
  virtual int peer_rank() const = 0;

  // What the backend uses to reach the peer (e.g. UCX lanes: transports and
  // devices), for logs and benchmark reports. May be empty.
  virtual std::string Describe() const { return ""; }

  // Writes `src` into the peer's `dst`. `done` fires once `src` may be reused.
  // With a `notification`, the peer's Transport::PollNotification() returns
  // {this rank, *notification} exactly once, after the written bytes are
  // visible to the peer, and notifications of one endpoint arrive in the
  // order their writes were posted.
  virtual absl::Status PostWrite(const LocalSlice& src, const RemoteSlice& dst,
                                 std::optional<uint32_t> notification,
                                 Completion done) = 0;

  // A write whose arrival the peer sees in its own memory, with no
  // notification queue: writes `src` into the peer's `dst`, then stores
  // `flag` into the peer's word `flag_word` (8 bytes, 8-byte aligned; see
  // CheckFlagWord), ordered so that a peer whose acquire load of that word
  // returns `flag` sees every byte of this write and of each write posted
  // before it on this endpoint. The peer polls the word itself, as
  // perftest's latency tests poll the last byte: a flag placed right behind
  // the data shares its cache line or the next one. How each backend orders
  // the flag (one copy and a release store into a mapped same-host peer;
  // the data, a flush, then the flag elsewhere) is in docs/rdma.md. `done`
  // fires once `src` may be reused and the flag is stored or on its way.
  // Errors as PostWrite(); kUnimplemented where the backend has no flagged
  // writes (Capabilities::flag_writes is false): write with a notification.
  virtual absl::Status PostWriteWithFlag(const LocalSlice& src,
                                         const RemoteSlice& dst,
                                         const RemoteSlice& flag_word,
                                         uint64_t flag, Completion done);

  // Binds a flagged write of `src` into the peer's `dst` with its flag in
  // `flag_word` (as PostWriteWithFlag), to be posted many times, each time
  // with a flag of its own: for a loop that sends the same buffer into the
  // same place every round (a ping-pong, a ring's chunk, a mailbox slot).
  // A backend that resolves what the post needs (UCX: the slices' checks,
  // the remote key, the peer's mapped memory) does it here once, and each
  // BoundFlaggedWrite::Post() then costs about the copy and the flag's
  // store; elsewhere each Post() is a PostWriteWithFlag() and checks then.
  // Errors: those PostWriteWithFlag would return for these slices
  // (kUnimplemented without flagged writes), here where the backend binds,
  // else from each Post(); the limit of operations in flight applies to
  // the posts only. The binding keeps copies of the peer's descriptors;
  // it must not outlive this endpoint, nor `src`'s region.
  virtual absl::StatusOr<std::unique_ptr<BoundFlaggedWrite>> BindFlaggedWrite(
      const LocalSlice& src, const RemoteSlice& dst, const RemoteSlice& flag_word);

  // Reads the peer's `src` into `dst`; `done` fires once the bytes are in
  // `dst`.
  virtual absl::Status PostRead(const LocalSlice& dst, const RemoteSlice& src,
                                Completion done) = 0;

  // Binds a read of the peer's `src` into `dst` (as PostRead), to be posted
  // many times: for a loop that reads the same place every round (a peer's
  // clock word, a mailbox, a parameter slice). As BindFlaggedWrite: a
  // backend that resolves what the post needs (UCX: the slices' checks, the
  // remote key, the peer's mapped memory) does it here once; elsewhere each
  // BoundRead::Post() is a PostRead() and checks then. Errors: those
  // PostRead would return for these slices, here where the backend binds,
  // else from each Post(); the limit of operations in flight applies to
  // the posts only. The binding keeps a copy of the peer's descriptor; it
  // must not outlive this endpoint, nor `dst`'s region.
  virtual absl::StatusOr<std::unique_ptr<BoundRead>> BindRead(const LocalSlice& dst,
                                                              const RemoteSlice& src);

  // `done` fires once every operation posted before it has completed and its
  // writes are visible at the peer.
  virtual absl::Status PostFlush(Completion done) = 0;

  // True where the plain writes posted on this endpoint (PostWrite without
  // a notification) are placed at the peer in the order they were posted:
  // a peer that sees such a write's bytes sees those of every plain write
  // posted on this endpoint before it. A flag written that way may then
  // follow its payload at once, with no flush between them
  // (onesided/slots/slot_ring.h); a flush still says when the payload's
  // source may be reused. Flagged and notified writes keep their own
  // ordering (above), outside this one. UCX over one TCP connection
  // (rdma/ucx/ep_lanes.h; decided once, at Connect()), and the loopback
  // backend where asked; false elsewhere, and for an endpoint that wraps
  // another: order those writes with a flush.
  virtual bool OrdersWrites() const { return false; }

  // Maps the peer's `remote` into this process for loads and stores, where
  // the backend can: a same-host peer's shared memory (UCX: ucp_rkey_ptr;
  // loopback: the peer's own memory). `remote` is checked as a post's is
  // (CheckRemoteSlice). The pointer stays valid while this endpoint is open
  // and the peer keeps the region; what is stored through it is visible to
  // the peer as its own memory's stores are (use atomics and fences).
  // kUnimplemented where the backend cannot map it (another host, memory
  // that is not shared, a backend without mappings): use the posts then.
  virtual absl::StatusOr<std::byte*> MapRemote(const RemoteSlice& remote);

  // Resolves now what operations on `region` need (UCX: unpacks and caches
  // its remote key, which attaches a same-host peer's shared memory), while
  // the peer is known to hold the region, rather than at the first post,
  // which may come after the peer has let it go (UCX 1.13 then faults
  // unpacking the key of a segment already removed). OK where a backend
  // needs nothing; else the error a post would get for this region.
  virtual absl::Status Prepare(const RemoteRegion& region);

  // Stops the endpoint: operations still in flight complete with kCancelled
  // (their callbacks fire from later Progress() calls); later posts return
  // kFailedPrecondition. Idempotent. The destructor calls it.
  virtual absl::Status Close() = 0;
};

// A flagged write bound to its slices (Endpoint::BindFlaggedWrite).
// Thread-compatible, as its endpoint: posted from the thread that posts on
// the endpoint.
class BoundFlaggedWrite {
 public:
  virtual ~BoundFlaggedWrite() = default;

  // Endpoint::PostWriteWithFlag(src, dst, flag_word, flag, done) with the
  // bound slices: the same ordering, completion and errors.
  virtual absl::Status Post(uint64_t flag, Completion done) = 0;

  // The same write, with Post()'s ordering (the flag covers this data and
  // every earlier write of the endpoint), where it is done at the peer
  // before this returns (UCX: a copy into a same-host peer's mapped memory
  // and the flag's release store): returns true, and the write is counted
  // nowhere and fires no completion, as an unsignalled work request whose
  // completion nobody waits for; `src` may be reused at once. For a loop
  // that learns from the peer's answer that its write arrived, and would
  // spend on a completion more than the write costs. Where the write would
  // not be done at once (it goes through the transport, or the backend
  // binds nothing), posts nothing and returns false: post it with Post().
  // The answer may change between calls (UCX: false for good once a write
  // of the endpoint went by UCX put), so call it each time. The limit of
  // operations in flight does not apply (nothing is in flight). Errors,
  // with nothing posted: a closed endpoint (kFailedPrecondition) or a
  // failed one may be refused here (UCX refuses them whether or not the
  // write would map); otherwise this returns false and Post() refuses. A
  // peer's death is noticed by Transport::Progress(), as for every
  // operation: a loop of inline writes keeps calling it.
  virtual absl::StatusOr<bool> TryPostInline(uint64_t flag);
};

// A read bound to its slices (Endpoint::BindRead). Thread-compatible, as its
// endpoint: posted from the thread that posts on the endpoint.
class BoundRead {
 public:
  virtual ~BoundRead() = default;

  // Endpoint::PostRead(dst, src, done) with the bound slices: the same
  // completion and errors.
  virtual absl::Status Post(Completion done) = 0;

  // The same read where it is done before this returns (UCX: a copy out of
  // a same-host peer's mapped memory): returns true with the bytes in
  // `dst`, and the read is counted nowhere and fires no completion.
  // Where it would not be done at once (it goes through the transport, or
  // the backend binds nothing), posts nothing and returns false: post it
  // with Post(). As BoundFlaggedWrite::TryPostInline: the limit of
  // operations in flight does not apply; a closed (kFailedPrecondition) or
  // failed endpoint may be refused here, else this returns false and
  // Post() refuses; a peer's death is noticed by Transport::Progress().
  virtual absl::StatusOr<bool> TryPostInline();
};

}  // namespace rdmaflow::rdma

#endif  // RDMAFLOW_RDMA_ENDPOINT_H_
