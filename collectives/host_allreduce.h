// File: host_allreduce.h
// -----------------------------------------------------------------------------
// HostAllReduce: an in-place all-reduce among ranks of one host, on direct
// access to each other's memory (Endpoint::MapRemote: UCX shared memory
// through ucp_rkey_ptr, the loopback backend's own memory). No byte is
// staged: each member reads its peers' buffers where they lie.
//
//   - one shot (small calls): every member reads every member's range and
//     reduces it, in member order, into a private scratch buffer; after a
//     "done reading" flag from every peer it copies the result in place.
//     Two flag exchanges per call, no per-call handshake beyond them.
//   - reduce-scatter / all-gather (large calls): member p reduces segment p
//     of every peer into its own buffer, chunk by chunk, in one pass, and
//     publishes how many chunks are final; the others copy those chunks
//     straight out of its buffer as they become final. Every byte is read
//     once from each peer and written once: no staging copy.
//
// A member's range may also lie outside the data region, in its own
// ordinary memory (AllReduceExternal: a tensor the caller allocated
// itself): the peers then read it with process_vm_readv (Linux cross-
// memory attach, collectives/peer_process.h), one copy straight out of
// the owner's pages, where staging it would cost a copy into the region
// first. Create() probes every peer's process and the members agree
// through the store, as on mapping; external() says whether they did.
//
// Each member's control block (one cache line per word, written only by
// its owner, read by the peers through the mapping): `entered` (the call
// number, after the call's arguments), `reduced` (chunks of its segments
// made final, counted over all calls), `done` (the call number, once it
// has read what it needs from the peers). A member leaves a call only
// after every peer's `done`, so the next call may change its buffer.
// What a peer writes there is untrusted: a counter ahead of the call, a
// chunk count beyond its segment, or other call arguments than ours are
// kDataLoss / kInvalidArgument naming the peer, never a wrong read.
//
// The data region belongs to the caller (AllReduceGroup passes the ring's,
// so both algorithms work on the same buffer) and must outlive this object.
// Create() returns kUnimplemented, on every member alike, when any member
// cannot map any other's memory (another host, verbs, TCP): the members
// agree through the store, so none takes a path the others do not.
//
//   ASSIGN_OR_RETURN(auto host, HostAllReduce::Create(
//       transport, store, "job", members, ring->data_region(), options));
//   RETURN_IF_ERROR(host->AllReduce(0, n, DataType::kFloat32));
//   RETURN_IF_ERROR(host->Shutdown());
#ifndef RDMAFLOW_COLLECTIVES_HOST_ALLREDUCE_H_
#define RDMAFLOW_COLLECTIVES_HOST_ALLREDUCE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "collectives/call_word.h"
#include "collectives/data_mover.h"
#include "collectives/reduce.h"
#include "collectives/segment_maps.h"
#include "onesided/links/peer_links.h"
#include "onesided/progress/progress_loop.h"
#include "onesided/progress/yield_gate.h"
#include "rdma/endpoint.h"
#include "rdma/memory_region.h"
#include "rdma/remote_region.h"
#include "rdma/store.h"
#include "rdma/transport.h"

namespace rdmaflow::collectives {

// A member's control block: byte offsets of its 64-bit words (for the
// hostile-peer tests). `reduced` counts the chunks of its segments made
// final since Create(), over all calls.
namespace host_allreduce_layout {
constexpr size_t kEntered = 0;  // the call under way, after its arguments:
constexpr size_t kOffset = 8;
constexpr size_t kCount = 16;
constexpr size_t kTypeOp = 24;  // the call's kind and arguments, packed:
// Its range's address in its owner's process (AllReduceExternal), read
// with process_vm_readv; 0: in the data region, at kOffset.
constexpr size_t kExternal = 32;
// Where that range lies in a shared segment of its owner's
// (collectives/shared_segments.h), so peers map it instead: the segment's
// descriptor in its owner's process plus 1 (0: none), its token, and the
// range's offset in it. Only a hint: a peer that cannot map the segment
// reads the address instead.
constexpr size_t kSegmentFd = 40;
constexpr size_t kSegmentToken = 48;
constexpr size_t kSegmentOffset = 56;
// collectives/call_word.h, of one of these kinds:
constexpr uint64_t kAllReduceCall = call_word::kAllReduce;
constexpr uint64_t kReduceCall = call_word::kReduce;
constexpr uint64_t kBroadcastCall = call_word::kBroadcast;
// The word of a call whose range was bad on its member.
constexpr uint64_t kPoisonedCall = call_word::kPoisoned;
constexpr size_t kReduced = 64;
constexpr size_t kDone = 128;   // the call number; with kAborted: gave up in it
constexpr uint64_t kAborted = uint64_t{1} << 63;
constexpr size_t kWaiting = 192;  // 1 while its owner sleeps on its bell
constexpr size_t kBell = 256;     // 32-bit futex word, rung by the peers
constexpr size_t kBytes = 320;
}  // namespace host_allreduce_layout

struct HostAllReduceOptions {
  // Names the collective in the store (unique per namespace).
  std::string name = "allreduce";
  // Calls of at most this many bytes take the one-shot path; 0 never does.
  size_t one_shot_max_bytes = size_t{64} << 10;
  // Unit of the reduce-scatter's progress (>= 64, a multiple of 64): a peer
  // copies a chunk of our segment once it is final.
  size_t chunk_bytes = size_t{64} << 10;
  // An error when a call waits this long for a peer.
  absl::Duration timeout = absl::Seconds(120);
  // How long a wait polls the peers' words before it waits through the
  // loop (which sleeps after its policy's spin rounds, ~55 us a sleep with
  // the kernel's timer slack). Negative: 50 us where every member can have
  // a CPU of its own (members <= the CPUs this process may use, or the
  // host's online CPUs when it is pinned to one), else 0: with more ranks
  // than cores, a spinning rank holds the core its peer needs.
  absl::Duration spin_for = absl::Microseconds(-1);
  // Where a wait does not spin (spin_for 0), whether its idle rounds yield
  // the core while yields come back quickly, sleeping on the bell after a
  // slow one (onesided/progress/yield_gate.h); false: they always sleep.
  bool yield_while_cheap = true;
  // The transport's progress loop (probes the peers while a call waits);
  // must outlive this object, which is created, called and destroyed on
  // the loop's thread. Required without links; on links, null or theirs.
  onesided::ProgressLoop* loop = nullptr;
  // How the bytes move (collectives/data_mover.h): nullptr for host memory;
  // a DeviceDataMover when the data region is device memory. Must outlive
  // this object; every member uses the same kind (the layout says which).
  DataMover* mover = nullptr;
  // Whether members may call AllReduceExternal: probed at Create() (host
  // memory only) and agreed by every member; one member with it off keeps
  // every member off (no error).
  bool external_reads = true;
};

struct HostAllReduceStats {
  int64_t calls = 0;
  int64_t one_shot_calls = 0;
  int64_t reads = 0;       // ranges read from a peer's buffer
  int64_t bytes_read = 0;  // from the peers' buffers
  // Of those, read out of a peer's process (its range outside its region).
  int64_t process_reads = 0;
  int64_t process_bytes_read = 0;
  int64_t external_calls = 0;  // our AllReduceExternal calls
  // Of the process reads' kind, those read from a peer's shared segment
  // through a mapping of it instead (no system call, no copy in between),
  // segments mapped at first sight, and published segments that could not
  // be mapped (read out of the process instead; segment_refusal() says
  // why the first time).
  int64_t segment_reads = 0;
  int64_t segment_bytes_read = 0;
  int64_t segments_mapped = 0;
  int64_t segment_fallbacks = 0;
  // Idle rounds of waits that yielded the core, and those that took long
  // enough to close the gate (YieldGate).
  int64_t yields = 0;
  int64_t slow_yields = 0;
};

// Thread-compatible: one thread, the loop's.
class HostAllReduce {
 public:
  // Over `members` (global ranks, the same list on every member, including
  // the links' rank), on `data` (this rank's region; every member's has the
  // same size), mapping the peers' memory through the links' data lanes.
  // kInvalidArgument for bad options or members;
  // kFailedPrecondition when a member was created with other options;
  // kUnimplemented (on every member) when some member cannot map a peer's
  // memory; kDeadlineExceeded naming a member that never came.
  static absl::StatusOr<std::unique_ptr<HostAllReduce>> Create(
      onesided::PeerLinks& links, std::vector<int> members, const rdma::MemoryRegion& data,
      const HostAllReduceOptions& options);
  // The same on links of its own, on options' loop (required).
  static absl::StatusOr<std::unique_ptr<HostAllReduce>> Create(
      rdma::Transport& transport, rdma::Store& store, const std::string& ns,
      std::vector<int> members, const rdma::MemoryRegion& data,
      const HostAllReduceOptions& options);
  // Unless Shutdown()'s barrier passed, a peer may still read our control
  // block: it is then left allocated (with a message on stderr). The
  // mappings of the peers' memory stay the links' (until they go).
  ~HostAllReduce();

  // What every member publishes as "host/<name>/<rank>/layout" and checks
  // its peers' against (hostile-peer tests play a member by hand with it).
  static std::string LayoutText(const HostAllReduceOptions& options, size_t capacity,
                                const std::vector<int>& members);

  int size() const { return static_cast<int>(members_.size()); }
  int position() const { return position_; }
  const HostAllReduceStats& stats() const { return stats_; }
  // Whether no peer reads our memory any more (Shutdown()'s barrier
  // passed, or nothing was published): the caller may free the region.
  bool quiesced() const { return quiesced_ || !published_; }
  // Whether a call of `bytes` takes the one-shot path.
  bool OneShot(size_t bytes) const;
  // Whether every member can read every other's process memory, so
  // AllReduceExternal runs; else why not ("off in the options", the
  // kernel's refusal for one peer, ...).
  bool external() const { return external_ok_; }
  const std::string& external_refusal() const { return external_refusal_; }
  // Why a peer's shared segment was first read out of its process instead
  // of mapped ("" while none was).
  const std::string& segment_refusal() const { return segment_refusal_; }

  // Reduces [offset, offset + count * ElementSize(type)) of the data region
  // across the members, in place; every member calls it with the same
  // count, type and operator, in the same order, each at an offset of its
  // own (a staged tensor at 0 on one member may meet a registered one
  // elsewhere on another). kInvalidArgument / kOutOfRange for a bad range
  // (the other members get kInvalidArgument for that call);
  // kInvalidArgument naming the member whose call differs (every member
  // gets one, and the collective stays usable); kDeadlineExceeded naming
  // the member waited for; kUnavailable for a dead peer; kDataLoss for a
  // forged control word or a peer's offset outside its region. After those
  // the collective refuses further calls (kFailedPrecondition).
  // `variant` is the caller's own distinction between calls that reduce
  // alike (the c10d backend: 1 for AVG, reduced as a sum and divided
  // afterwards), compared as count, type and operator are.
  // `result`: where this member wants the result instead of its range,
  // e.g. the caller's own buffer that it copied into the range to take part
  // (count elements, outside the data region, else kInvalidArgument here
  // and for the other members as a bad range is; nullptr: in place). The
  // result then goes straight there, and the range keeps this member's
  // input but for its own segment: one copy fewer than copying it out.
  // After an error `result` holds unspecified bytes, and nothing of the
  // call touches it any more, but for kDeadlineExceeded saying its device
  // work still ran (a hung device): then the device may yet write it.
  absl::Status AllReduce(size_t offset, size_t count, DataType type,
                         ReduceOp op = ReduceOp::kSum, uint8_t variant = 0,
                         std::byte* result = nullptr);

  // AllReduce()'s contract, in place on `buffer` (count elements in this
  // process's ordinary memory, outside any region: e.g. a tensor the caller
  // allocated itself) instead of a range of the data region. The peers read
  // it with process_vm_readv; it pairs with a peer's AllReduce() of a range
  // of its region as with its AllReduceExternal(). Needs external(): else
  // kFailedPrecondition, and the other members get kInvalidArgument for the
  // call, as for a bad range. A peer's address that is not mapped in its
  // process is kDataLoss; a peer whose process is gone, kUnavailable.
  absl::Status AllReduceExternal(std::byte* buffer, size_t count, DataType type,
                                 ReduceOp op = ReduceOp::kSum, uint8_t variant = 0);

  // AllReduce()'s contract, but only the member at position `root` gets the
  // result (in place); the others' ranges are left as they were (one-shot)
  // or hold partial results (the reduce-scatter's segments). The first phase of a hierarchical
  // all-reduce: the host's leader then reduces across hosts.
  absl::Status Reduce(size_t offset, size_t count, DataType type, ReduceOp op, int root,
                      uint8_t variant = 0);

  // Copies `bytes` at the member at position `root` (from its offset) into
  // every other member's range (at its own offset), read straight out of
  // the root's buffer. The same errors as AllReduce()'s; a call whose root,
  // size or `variant` (AllReduce()'s) differs between members is
  // kInvalidArgument on every member.
  absl::Status Broadcast(size_t offset, size_t bytes, int root, uint8_t variant = 0);

  // Ends our part after an error outside this collective (a hierarchical
  // all-reduce's leader whose ring across hosts failed): marks our next
  // call aborted, so members waiting in it fail at once with kAborted
  // naming us instead of timing out. Later calls are refused.
  void Abandon(const absl::Status& why);

  // Meets every member at a store barrier (after it, no peer reads our
  // memory), for up to `timeout` (the options' by default). Collective;
  // call once, after the last AllReduce(), also after an error.
  absl::Status Shutdown(std::optional<absl::Duration> timeout = std::nullopt);

 private:
  struct Peer;

  HostAllReduce(onesided::PeerLinks& links, std::vector<int> members, int position,
                const rdma::MemoryRegion& data, const HostAllReduceOptions& options);
  // Publishes, maps every peer's regions, and agrees with the members
  // through the store on whether every mapping worked.
  absl::Status Connect();
  std::string Where() const;

  // One call of any kind: checks our range (`count` units of `element`
  // bytes at `offset`, and `root`, -1 for none), enters, runs `body(call,
  // bytes)` unless the members' calls differ, and on an error marks our
  // done word aborted. `type_op`: the packed kind and arguments.
  // `bad_argument`: another of our arguments is bad (the call is then
  // refused like a bad range).
  template <typename Body>
  absl::Status Run(size_t offset, size_t count, size_t element, absl::string_view unit,
                   uint64_t type_op, int root, Body body,
                   absl::Status bad_argument = absl::OkStatus());
  // Publishes the call and waits for every peer's; `differs` when a peer's
  // count or packed kind and arguments are not ours (an error, but every
  // member sees one, so the call can end cleanly).
  // `poisoned`: our range was bad; publish a call that differs from all.
  absl::Status Enter(uint64_t call, size_t offset, size_t count, size_t element,
                     uint64_t type_op, bool poisoned, bool& differs);
  // `root` -1: every member gets the result; else only that position.
  // `result`: AllReduce()'s (nullptr: in place).
  absl::Status OneShotCall(uint64_t call, size_t offset, size_t bytes,
                           size_t count, DataType type, ReduceOp op, int root,
                           std::byte* result);
  absl::Status ScatterGatherCall(uint64_t call, size_t offset, size_t count,
                                 DataType type, ReduceOp op, int root, std::byte* result);
  // Probes every peer's process and agrees with the members on
  // external() (after the mapping's agreement).
  absl::Status AgreeOnExternal(const std::string& scope);
  // This member's range of the call under way: the external buffer, or
  // the region's range at `offset`.
  std::byte* Own(size_t offset) const {
    return external_ != nullptr ? external_ : data_.data() + offset;
  }
  // Bytes [at, at + bytes) of `peer`'s range in the call under way, for a
  // reduction: where they lie in its mapped region, or read out of its
  // process into `slot` (of the peers' read buffers, one per peer), with
  // what follows up to `until` (bytes into its range, at most the slot's
  // size in all): a system call reads more than one chunk at a time.
  absl::StatusOr<const std::byte*> PeerBytes(const Peer& peer, size_t at, size_t bytes,
                                             size_t slot, size_t until);
  // The read buffer slot of the peer at position `p` (ours has none).
  size_t SlotOf(int p) const { return static_cast<size_t>(p < position_ ? p : p - 1); }
  // Copies bytes [at, at + bytes) of `peer`'s range into `dst` (ours),
  // straight out of the mapping or process.
  absl::Status CopyFromPeer(const Peer& peer, size_t at, size_t bytes, std::byte* dst);
  // `peer`'s range of the call under way (`bytes` from `offset` in the
  // segment it published), mapped; nullptr when it cannot be (then it is
  // read out of the peer's process).
  const std::byte* MapSegment(const Peer& peer, uint64_t fd, uint64_t token, uint64_t offset,
                              size_t bytes);
  // When a wait for our own data mover's work gives up.
  absl::Time Deadline() const;
  // Publishes `done` and waits for every peer's.
  absl::Status Leave(uint64_t call);
  // Waits until `ready(peer)` holds for every peer (`any`: for one of
  // them). `ready` returns an error for a forged word.
  template <typename Ready>
  absl::Status WaitFor(uint64_t call, const char* what, bool any, Ready ready);
  // Sleeps on our bell until a peer rings it, `limit` passes, or (checked
  // after announcing the sleep) `ready()` already holds.
  template <typename Ready>
  void SleepUntilRung(Ready& ready, absl::Duration limit);
  // Rings the bell of every peer that sleeps on it: after each word we
  // publish.
  void RingPeers();
  // kAborted naming `peer` when its done word says it gave up.
  absl::Status CheckNotAborted(const Peer& peer, uint64_t done) const;

  onesided::PeerLinks& links_;
  rdma::Transport& transport_;
  const std::vector<int> members_;
  const int position_;
  const rdma::MemoryRegion& data_;
  const HostAllReduceOptions options_;

  std::unique_ptr<rdma::MemoryRegion> control_;
  std::byte* block_ = nullptr;  // our control block (control_)
  std::vector<Peer> peers_;  // by position; ours is empty
  HostDataMover host_mover_;
  DataMover* mover_ = nullptr;  // options_.mover, else host_mover_
  std::byte* scratch_ = nullptr;  // the one-shot result (mover_'s)
  std::vector<int64_t> watches_;  // subscriptions to the peers' watches
  std::vector<int> peer_ranks_;  // probed while a call waits
  // AllReduceExternal: its buffer while the call is under way, else null.
  std::byte* external_ = nullptr;
  bool external_ok_ = false;
  std::string external_refusal_ = "not probed";
  // The peers' shared segments, mapped at first sight.
  SegmentMaps segment_maps_;
  std::string segment_refusal_;
  // The peers' bytes read out of their processes: one slot per peer.
  std::vector<std::byte> process_scratch_;
  size_t slot_bytes_ = 0;
  // Per slot, the bytes of its peer's range it holds: [begin, end) in the
  // call `call` (a slot read in an earlier call holds nothing).
  struct SlotHolds {
    uint64_t call = 0;
    size_t begin = 0, end = 0;
  };
  std::vector<SlotHolds> slot_holds_;
  uint64_t calls_ = 0;
  uint64_t reduced_ = 0;  // our `reduced` counter
  absl::Duration spin_for_;
  // Whether idle rounds yield (options, spin_for_ 0), and what they learnt.
  bool yield_ = false;
  onesided::YieldGate yield_gate_;
  uint64_t waits_ = 0;  // waits through the loop, numbered for the gate
  bool published_ = false;
  bool quiesced_ = false;
  absl::Status failure_;
  // Made by the Create() without links (destroyed last).
  onesided::OwnLinks own_;
  HostAllReduceStats stats_;
};

}  // namespace rdmaflow::collectives

#endif  // RDMAFLOW_COLLECTIVES_HOST_ALLREDUCE_H_
