// File: ring_allreduce.h
// -----------------------------------------------------------------------------
// RingAllReduce: an in-place all-reduce over a group of ranks, as a ring
// reduce-scatter followed by an all-gather (ring_schedule.h), built on
// one-sided writes into memory planned once, at Create():
//   - a data region of `capacity_bytes` per rank, where callers keep what
//     they reduce (the all-reduce strategy lays the model's gradients there,
//     so nothing is copied in or out);
//   - per ring link, `slots` staging slots of `chunk_bytes` at the receiver,
//     and one flag word per slot.
// Each message (one piece of a segment) is a write of the piece, a flush,
// then a write of its sequence number into the receiver's flag word (on
// the link's control lane, so that it does not queue behind the pieces
// posted while its flush was out); the
// receiver polls its flags in local memory, reduces a staged piece into its
// buffer and passes it on, so reduction overlaps the transfer of the next
// pieces. All-gather pieces are written straight into the receiver's data
// region (or, where options say so, staged like the reduce-scatter's).
// Back-pressure: the receiver writes a credit word (messages it has
// released) into the sender's memory; a sender keeps at most
// min(slots, reduce-scatter messages) messages ahead of it. Notifications
// are not used, so a collective shares its transport with a communicator.
// Each call also sends its left neighbour a call descriptor (where its
// range lies, count, type, operator: ring_layout.h) the same way, so that
// each member may reduce at an offset of its own (a staged tensor on one
// member, a registered one on another) and different calls are an error on
// every member instead of wrong sums. A sender's messages from n - 1 on
// (the all-gather among them) wait for the receiver's descriptor; its first
// n - 1 do not, so the check costs no round trip.
// Flags and credits are written by the neighbours, so both are checked
// before they count: a flag holds the value of its slot's previous message
// or of the one due, a credit never goes back nor releases a message not
// yet sent; anything else is kDataLoss naming the neighbour.
// Giving up (an error or a timeout) closes both links, which cancels what
// we posted; and since a neighbour may still write into our regions until
// every member has passed Shutdown()'s barrier, a ring destroyed before
// that leaves its regions registered (logged) rather than free them under
// a late write.
//
//   ASSIGN_OR_RETURN(auto ring, RingAllReduce::Create(
//       transport, store, "job", /*members=*/{0, 1, 2, 3}, options));
//   std::memcpy(ring->data(), grads, bytes);              // or lay them there
//   RETURN_IF_ERROR(ring->AllReduce(0, bytes / 4, DataType::kFloat32));
#ifndef RDMAFLOW_COLLECTIVES_RING_ALLREDUCE_H_
#define RDMAFLOW_COLLECTIVES_RING_ALLREDUCE_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/reduce.h"
#include "collectives/ring_schedule.h"
#include "onesided/links/peer_links.h"
#include "onesided/progress/progress_loop.h"
#include "onesided/progress/wait_policy.h"
#include "onesided/slots/slot_link.h"
#include "onesided/slots/slot_ring.h"
#include "rdma/endpoint.h"
#include "rdma/memory_region.h"
#include "rdma/remote_region.h"
#include "rdma/store.h"
#include "rdma/transport.h"

namespace rdmaflow::collectives {

struct RingAllReduceOptions {
  // Names the collective in the store (unique per namespace).
  std::string name = "allreduce";
  // Bytes of the data region every member allocates (the same everywhere).
  size_t capacity_bytes = 0;
  // Largest piece one message carries (>= 64).
  size_t chunk_bytes = size_t{256} << 10;
  // Staging slots per link, at most (1..1024): the ring allocates no more
  // than a call over its whole data region can fill, (members - 1) x pieces
  // per segment. Deep staging lets a rank run a segment or two ahead of a
  // neighbour that lost its core: with 4 ranks on 2 cores beside a compute
  // load, 32 slots kept 0.52-0.75 of the idle 16 MiB bandwidth where 8 kept
  // 0.42-0.59 (docs/collectives.md, "Sharing the cores"). 32 x 256 KiB is
  // 8 MiB of registered staging per ring.
  int slots = 32;
  // An error when a call makes no progress for this long.
  absl::Duration timeout = absl::Seconds(120);
  // A silent neighbour is probed (a flush) this often.
  absl::Duration liveness_interval = absl::Seconds(1);
  // How a call idles while its neighbours have nothing for it: spin, then
  // yield, then sleep (onesided/progress/wait_policy.h). With more ranks
  // than cores, a ring that only spins or yields starves the rank it waits
  // for.
  onesided::WaitPolicy wait = onesided::WaitPolicy::Adaptive();
  // The transport's progress loop, shared with its other protocols (the
  // c10d engine's Messenger, a strategy's communicator): it must outlive
  // the ring, which is created, called and destroyed on the loop's thread.
  // The ring's calls then idle by `wait`, but its neighbours are probed at
  // the loop's liveness interval, and a probe of a neighbour flushes every
  // watch of it on the loop. Null: the ring makes a loop of its own (with
  // `wait` and `liveness_interval`). Created on links, the ring runs on
  // the links' loop (this must be null or it).
  onesided::ProgressLoop* loop = nullptr;
  // The data region, when the caller owns it (AllReduceGroup: the same
  // region under every algorithm); registered with this transport, of
  // exactly capacity_bytes. Null: the ring allocates its own. The ring
  // holds a reference, and keeps it past its destruction when a neighbour
  // might still write into the region.
  std::shared_ptr<rdma::MemoryRegion> data;
  // All-gather pieces bound for bytes at or past this offset of the data
  // region are written into the receiver's staging slots and copied into
  // the region once their flag has been checked, instead of straight into
  // it: then a neighbour that stalls, and writes after a call gave up,
  // writes into staging, never into that part of the region. For memory
  // handed to callers (the c10d backend's registered tensors); it costs a
  // copy of those pieces. Every member must pass the same (Create() checks
  // its neighbours'). The default: none.
  size_t gather_in_slots_from = std::numeric_limits<size_t>::max();
};

struct RingAllReduceStats {
  int64_t calls = 0;
  int64_t messages = 0;    // sent
  int64_t bytes_sent = 0;  // payload written to the next rank
};

// Thread-compatible: one thread, the one that drives the transport.
class RingAllReduce {
 public:
  // Collective over `members` (global ranks in ring order, the same list on
  // every member, including the links' rank): allocates and publishes this
  // rank's regions under <ns>/ring/<name>/<rank>/..., fetches its
  // neighbours', and takes the links' data lane to the right neighbour and
  // control lane to the left one (credits: see Connect()).
  // kInvalidArgument for bad options or members; kFailedPrecondition when a
  // neighbour was created with other options or members; kDeadlineExceeded
  // naming a member that never came.
  static absl::StatusOr<std::unique_ptr<RingAllReduce>> Create(
      onesided::PeerLinks& links, std::vector<int> members,
      const RingAllReduceOptions& options);
  // The same on links of its own (on options' loop, or a loop of its own),
  // for a ring alone on its transport.
  static absl::StatusOr<std::unique_ptr<RingAllReduce>> Create(
      rdma::Transport& transport, rdma::Store& store, const std::string& ns,
      std::vector<int> members, const RingAllReduceOptions& options);
  // Waits (briefly) for operations in flight; a neighbour whose operations
  // hang is severed from the links, which cancels them.
  // Call Shutdown() first so no neighbour still writes into our memory:
  // unless its barrier passed, the data and control regions are left
  // registered (leaked, with a message on stderr), as they are when one of
  // our own operations never completes.
  ~RingAllReduce();

  // The data region: what AllReduce() reduces, in place.
  std::byte* data() const { return data_->data(); }
  const rdma::MemoryRegion& data_region() const { return *data_; }
  // The abort words (ring_layout.h): what the neighbours write into besides
  // the data region and the slot links; for the hostile tests.
  const rdma::MemoryRegion& control_region() const { return *control_; }
  size_t capacity() const { return options_.capacity_bytes; }
  int size() const { return static_cast<int>(members_.size()); }
  int rank() const { return members_[position_]; }
  int position() const { return position_; }
  const RingAllReduceStats& stats() const { return stats_; }
  // Staging slots allocated per link: options.slots, or fewer where a call
  // over the whole data region could not fill them.
  int staging_slots() const { return options_.slots; }

  // Reduces elements [offset, offset + count * ElementSize(type)) of the
  // data region across the members, in place: afterwards every member holds
  // the same result. Every member must call it with the same count, type,
  // operator and `variant` (the caller's own distinction between calls that
  // reduce alike, as HostAllReduce's), in the same order as its other
  // calls; each at an offset of its own. Each member tells its left
  // neighbour its call (a call descriptor: offset, count, type, operator,
  // variant), which checks it before it sends there its message n - 1 (the
  // first that could be taken as all-gather), so no member finishes a call that another made differently: a
  // member that sees its neighbour's call differ fails with kAborted naming
  // both calls, and tells its neighbours, which fail with kAborted and pass
  // it on round the ring. kInvalidArgument / kOutOfRange for a misaligned
  // or oversized range (this member gives the call up, as Abandon() says:
  // the others get kAborted); kDeadlineExceeded (naming the neighbour and message) when the
  // ring stalls for `timeout`; kUnavailable for a dead neighbour; kDataLoss
  // when a neighbour wrote a flag, credit or descriptor outside the
  // protocol. After an error the collective is unusable: what we posted is
  // fenced before it returns, and later calls get kFailedPrecondition.
  absl::Status AllReduce(size_t offset, size_t count, DataType type,
                         ReduceOp op = ReduceOp::kSum, uint8_t variant = 0);

  // Waits for our last writes, then for every member at a store barrier,
  // each for up to `timeout` (the options' timeout by default). After an
  // error (ours or a link's) it returns that error at once, without the
  // barrier, where a dead or stalled member would keep everyone waiting:
  // the regions then stay registered when the ring is destroyed (logged),
  // as a neighbour may still write into them. Collective; call once, after
  // the last AllReduce().
  absl::Status Shutdown(std::optional<absl::Duration> timeout = std::nullopt);

  // Gives up our next call for `why` (returned), an error outside the ring
  // (a hierarchical leader whose host's reduce failed) or a range refused
  // on this member only: fails the ring and writes the neighbours that we
  // gave it up, so they fail that call with kAborted at once instead of
  // waiting for us (or pairing it with a later call of ours).
  absl::Status Abandon(absl::Status why);

 private:
  struct Call;

  RingAllReduce(onesided::PeerLinks& links, std::vector<int> members, int position,
                const RingAllReduceOptions& options);
  absl::Status Connect();
  std::string Where() const;

  // One pass of the call's state machine; sets `progressed` when anything
  // moved.
  absl::Status Turn(Call& call, bool& progressed);
  // Queues our call's descriptor to the left neighbour, once it has room.
  absl::Status Describe(Call& call, bool& progressed);
  // Checks the right neighbour's descriptor once it came: kAborted when its
  // call differs, kDataLoss for a forgery; the neighbours are told both.
  absl::Status LearnRight(Call& call, bool& progressed);
  // kAborted once a neighbour wrote that it gave up (and we pass it on).
  absl::Status CheckAborts(Call& call);
  // Writes that we give up call `number` into both neighbours' abort words
  // (once; what finds a full queue is posted by RetryAborts()).
  void PostAbort(uint64_t number);
  void RetryAborts();
  // Messages of `call` sent before the right neighbour's descriptor is
  // checked.
  uint64_t Unchecked(const Call& call) const;
  absl::Status Receive(Call& call, bool& progressed);
  absl::Status StartSends(Call& call, bool& progressed);
  // After an error: closes both links (our operations in flight complete
  // with kCancelled) and waits, up to min(timeout, 5 s), for them.
  void GiveUp();
  // Wraps a completion callback so that it does nothing once the ring is
  // destroyed (an operation that never completed keeps the transport
  // holding it).
  template <typename F>
  rdma::Completion Guarded(F f);
  absl::Status PostCredit();
  // Whether the all-gather piece of `range` goes through the staging slots
  // (options' gather_in_slots_from), at a receiver whose range lies at
  // `offset`.
  bool GatherInSlots(size_t offset, const Call& call, const ElementRange& range) const;
  // Joins the links' progress loop and subscribes to the neighbours.
  absl::Status JoinLoop();
  void Fail(absl::Status status);
  // The first failure: ours (probes, shutdown) or either link's.
  absl::Status failure() const;
  // Our operations in flight: the links' and the probes'.
  int64_t in_flight() const;

  onesided::PeerLinks& links_;
  rdma::Transport& transport_;
  const std::vector<int> members_;
  const int position_;
  const RingAllReduceOptions options_;
  const int left_rank_;   // global ranks of our neighbours
  const int right_rank_;

  std::shared_ptr<rdma::MemoryRegion> data_;
  std::unique_ptr<rdma::MemoryRegion> control_;
  rdma::RemoteRegion right_data_, right_control_, left_control_;
  // The links': the data lane to the right neighbour, and for credits to
  // the left one its control lane, also when the left neighbour is the
  // right one (2 members); the data's flags go on the right neighbour's
  // control lane (the left one's with 2 members). Null with 1 member.
  rdma::Endpoint* right_endpoint_ = nullptr;
  rdma::Endpoint* left_endpoint_ = nullptr;
  rdma::Endpoint* right_flag_endpoint_ = nullptr;

  // The slot links to the neighbours (onesided/slots/slot_link.h; one
  // when the left neighbour is the right one) and their rings
  // (ring_layout.h): messages to the right neighbour and from the left one,
  // whose sequence numbers count messages since Create(); call descriptors
  // to the left neighbour and from the right one, numbered by call.
  std::vector<std::unique_ptr<onesided::SlotLink>> slot_links_;
  onesided::SlotLink* right_link_ = nullptr;
  onesided::SlotLink* left_link_ = nullptr;
  // The rings' indices on their links (SlotLink::out_index/in_index).
  int data_out_ = -1, data_in_ = -1, calls_out_ = -1, calls_in_ = -1;
  onesided::SlotRingSender* sender_ = nullptr;
  onesided::SlotRingReceiver* receiver_ = nullptr;
  onesided::SlotRingSender* descriptor_sender_ = nullptr;
  onesided::SlotRingReceiver* descriptor_receiver_ = nullptr;
  onesided::ProgressLoop* loop_ = nullptr;
  std::vector<int64_t> watches_;  // subscriptions to the neighbours' watches
  // Made by the Create() without links (destroyed last, links first).
  onesided::OwnLinks own_;
  uint64_t next_seq_ = 0;        // first message of the next call
  uint64_t next_call_ = 0;       // the next call's number
  bool abort_posted_ = false;    // PostAbort() ran
  std::vector<bool> aborts_due_;  // abort writes not yet posted: to the right?
  uint64_t call_first_ = 0;      // the call under way, for error messages
  uint64_t call_end_ = 0;
  bool fenced_ = false;       // GiveUp() ran
  bool quiesced_ = false;     // Shutdown()'s barrier passed
  bool published_ = false;    // peers may have our regions' descriptors
  int64_t outstanding_ = 0;  // probes and shutdown flushes
  absl::Status failure_;
  RingAllReduceStats stats_;
  // Callbacks hold a weak_ptr to this: they may outlive the ring.
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

}  // namespace rdmaflow::collectives

#endif  // RDMAFLOW_COLLECTIVES_RING_ALLREDUCE_H_
