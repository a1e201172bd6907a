// File: ring_allreduce.cc
#include "collectives/ring_allreduce.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/call_word.h"
#include "collectives/members.h"
#include "collectives/ring_layout.h"
#include "common/annotate.h"
#include "common/shared_word.h"
#include "common/status_macros.h"
#include "onesided/progress/waits.h"
#include "rdma/rendezvous.h"

namespace rdmaflow::collectives {
namespace {

namespace layout = ring_layout;
constexpr int kMaxSlots = 1024;

// Staging slots beyond the reduce-scatter messages of a call over the whole
// data region would never fill: `slots` is a bound, this is what is
// allocated (the same on every member, whose options and world agree).
int StagingSlots(const RingAllReduceOptions& o, size_t world) {
  const uint64_t segment = (o.capacity_bytes + world - 1) / world;
  const uint64_t pieces = (segment + o.chunk_bytes - 1) / o.chunk_bytes;
  const uint64_t messages = std::max<uint64_t>(1, (world - 1) * pieces);
  return static_cast<int>(std::min<uint64_t>(o.slots, messages));
}

std::string Layout(const RingAllReduceOptions& o, const std::vector<int>& members) {
  // The version names the wire layout (ring_layout.h): a member of another
  // build stops at set-up instead of writing words where we keep others.
  return absl::StrCat("ring v2: slots=", o.slots, " chunk=", o.chunk_bytes,
                      " capacity=", o.capacity_bytes, " gather_in_slots_from=",
                      o.gather_in_slots_from < o.capacity_bytes
                          ? absl::StrCat(o.gather_in_slots_from)
                          : std::string("none"),
                      " members=", absl::StrJoin(members, ","));
}

// kInvalidArgument for options no ring can run with; kFailedPrecondition
// for a loop of another thread.
absl::Status CheckOptions(const RingAllReduceOptions& options) {
  const std::string what = absl::StrCat("all-reduce '", options.name, "'");
  if (options.capacity_bytes == 0 || options.chunk_bytes < 64 ||
      options.chunk_bytes % layout::kWord != 0 || options.slots < 1 ||
      options.slots > kMaxSlots) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": needs capacity_bytes > 0, chunk_bytes >= 64 and a multiple of 8, "
        "and 1..", kMaxSlots, " slots (got capacity ", options.capacity_bytes,
        ", chunk ", options.chunk_bytes, ", slots ", options.slots, ")"));
  }
  if (absl::Status valid = options.wait.Validate(); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", valid.message()));
  }
  if (options.liveness_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": liveness_interval must be positive, not ",
        absl::FormatDuration(options.liveness_interval)));
  }
  if (options.loop != nullptr && !options.loop->OnLoopThread()) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": its progress loop belongs to another thread (docs/thread_model.md)"));
  }
  return absl::OkStatus();
}

}  // namespace

// The state of one AllReduce() call.
struct RingAllReduce::Call {
  RingSchedule schedule;
  size_t offset;        // bytes into our data region
  size_t count;
  size_t element_size;
  DataType type;
  ReduceOp op;
  uint64_t word;        // call_word.h: what the neighbours' must equal
  uint64_t number;      // calls since Create(), counted from 0
  uint64_t first;       // sequence number of message 0
  uint64_t end;         // one past the last
  uint64_t window;      // messages a sender may run ahead of the credit
  bool described = false;   // our descriptor is queued to the left neighbour
  bool right_known = false;  // the right neighbour's descriptor was checked
  size_t right_offset = 0;   // ... and its range lies there
};

absl::StatusOr<std::unique_ptr<RingAllReduce>> RingAllReduce::Create(
    rdma::Transport& transport, rdma::Store& store, const std::string& ns,
    std::vector<int> members, const RingAllReduceOptions& options) {
  RETURN_IF_ERROR(CheckOptions(options));
  onesided::ProgressLoopOptions loop_options;
  loop_options.name = absl::StrCat("all-reduce '", options.name, "' on rank ", transport.rank());
  loop_options.wait = options.wait;
  loop_options.liveness_interval = options.liveness_interval;
  ASSIGN_OR_RETURN(onesided::OwnLinks own,
                   onesided::MakeOwnLinks(transport, store, ns, options.loop, loop_options,
                                          options.timeout,
                                          absl::StrCat("all-reduce '", options.name, "'")));
  RingAllReduceOptions on_links = options;
  on_links.loop = &own.links->loop();
  ASSIGN_OR_RETURN(std::unique_ptr<RingAllReduce> ring,
                   Create(*own.links, std::move(members), on_links));
  ring->own_ = std::move(own);
  return ring;
}

absl::StatusOr<std::unique_ptr<RingAllReduce>> RingAllReduce::Create(
    onesided::PeerLinks& links, std::vector<int> members, const RingAllReduceOptions& options) {
  const std::string what = absl::StrCat("all-reduce '", options.name, "'");
  RETURN_IF_ERROR(CheckOptions(options));
  if (options.loop != nullptr && options.loop != &links.loop()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": options.loop is not the loop of its links"));
  }
  if (!links.loop().OnLoopThread()) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": its progress loop belongs to another thread (docs/thread_model.md)"));
  }
  rdma::Transport& transport = links.transport();
  if (options.data != nullptr && options.data->size() != options.capacity_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": the caller's data region has ", options.data->size(),
        " bytes, capacity_bytes says ", options.capacity_bytes));
  }
  ASSIGN_OR_RETURN(const int position, PositionOf(members, transport.rank(), what));
  RingAllReduceOptions planned = options;
  planned.data = nullptr;  // held as data_
  planned.slots = StagingSlots(options, members.size());
  std::unique_ptr<RingAllReduce> ring(
      new RingAllReduce(links, std::move(members), position, planned));
  if (options.data != nullptr) {
    ring->data_ = options.data;
  } else {
    ASSIGN_OR_RETURN(rdma::MemoryRegion data, transport.Allocate(options.capacity_bytes));
    ring->data_ = std::make_shared<rdma::MemoryRegion>(std::move(data));
  }
  ASSIGN_OR_RETURN(rdma::MemoryRegion control, transport.Allocate(layout::ControlBytes()));
  std::memset(control.data(), 0, control.size());
  ring->control_ = std::make_unique<rdma::MemoryRegion>(std::move(control));
  if (ring->size() > 1) {
    RETURN_IF_ERROR(ring->Connect());
    RETURN_IF_ERROR(ring->JoinLoop());
  }
  return ring;
}

RingAllReduce::RingAllReduce(onesided::PeerLinks& links, std::vector<int> members,
                             int position, const RingAllReduceOptions& options)
    : links_(links),
      transport_(links.transport()),
      members_(std::move(members)),
      position_(position),
      options_(options),
      left_rank_(members_[(position + members_.size() - 1) % members_.size()]),
      right_rank_(members_[(position + 1) % members_.size()]) {}

RingAllReduce::~RingAllReduce() {
  if (loop_ != nullptr) {
    if (own_.loop == nullptr) loop_->CheckOnLoopThread(Where() + "'s destructor");
    if (loop_->OnLoopThread()) {
      for (int64_t watch : watches_) links_.Unsubscribe(watch);
    }
    if (!fenced_) {  // GiveUp() fenced already
      links_.Fence({right_rank_, left_rank_}, [&] { return in_flight() == 0; },
                   absl::Now() + absl::Seconds(5), Where() + " is closing");
    }
  }
  // Freeing memory that a neighbour may still write into (it has not passed
  // the shutdown barrier), or that one of our operations still reads or
  // writes, would let a late operation land in whatever reuses it: leave
  // it registered instead.
  const bool neighbours_done = quiesced_ || !published_;
  const int64_t never_completed = in_flight();
  if (never_completed > 0 || !neighbours_done) {
    const size_t bytes = (data_ != nullptr ? data_->size() : 0) +
                         (control_ != nullptr ? control_->size() : 0);
    // The slot links leave theirs, and their halves, in place too (they
    // say so: slot_link.h).
    if (!neighbours_done) {
      for (auto& link : slot_links_) link->KeepMemory();
    }
    const std::string why =
        never_completed > 0
            ? absl::StrCat(never_completed, " of its operations never completed")
            : std::string("no Shutdown() barrier passed, so a neighbour may "
                          "still write into it");
    std::fprintf(stderr,
                 "rdmaflow: %s: leaving its %zu bytes of registered memory "
                 "mapped: %s\n",
                 Where().c_str(), bytes, why.c_str());
    // Deliberately leaked references: the region outlives its other owners.
    new std::shared_ptr<rdma::MemoryRegion>(std::move(data_));
    control_.release();
  }
  alive_.reset();  // completions still held by the transport do nothing
  slot_links_.clear();
  own_.links.reset();
  own_.loop.reset();
}

template <typename F>
rdma::Completion RingAllReduce::Guarded(F f) {
  return [alive = std::weak_ptr<int>(alive_), f = std::move(f)](absl::Status s) mutable {
    if (alive.expired()) return;
    f(std::move(s));
  };
}

std::string RingAllReduce::Where() const {
  return absl::StrCat("all-reduce '", options_.name, "' on rank ",
                      transport_.rank(), " (position ", position_, " of ",
                      size(), ", left rank ", left_rank_, ", right rank ", right_rank_,
                      ")");
}

absl::Status RingAllReduce::Connect() {
  published_ = true;  // from here on, a neighbour may write into our regions
  // The slot rings, on a slot link per neighbour (one when it is both):
  // data to the right on its data lane, credited back on the left's
  // control lane; call descriptors to the left on its control lane,
  // credited back on the right's data lane. Credits go to the left
  // neighbour on the control lane, even when it is also the right one (2
  // members): on a transport that queues in order (UCX over TCP), a credit
  // sharing the data's endpoint waits behind up to a window of our own
  // data, and the neighbour's sender idles. Over a 1 Gbit/s link a
  // 2-member ring ran at 60-75 % of the link that way, 92-94 % with credits
  // apart (docs/collectives.md).
  const std::string right = absl::StrCat("rank ", right_rank_, " (the right neighbour)");
  const std::string left = absl::StrCat("rank ", left_rank_, " (the left neighbour)");
  std::map<int, onesided::SlotLinkOptions> links;
  for (const int neighbour : {right_rank_, left_rank_}) {
    onesided::SlotLinkOptions& link = links[neighbour];
    link.scope = absl::StrCat("ring/", options_.name);
    link.layout = Layout(options_, members_);
    link.peer = neighbour;
  }
  // Each direction's rings in one order on both ends: data, then calls.
  onesided::SlotRingShape data_out{layout::kDataRing, options_.slots, options_.chunk_bytes,
                                   /*stage_sends=*/false, onesided::LaneKind::kData, right};
  // The flags apart from the data too: a flag that goes once its message's
  // flush completed would, on the data's lane, wait behind every piece
  // posted meanwhile (with 4 members over 1 Gbit/s the ring ran at 60 % of
  // the link that way, 92-97 % with flags apart at 16 MiB). Where the data
  // lane places its writes in post order (UCX over TCP) the sender ignores
  // this and posts each flag right behind its piece on the data lane, with
  // no flush between: the link's rate from 1 MiB (docs/collectives.md).
  data_out.flag_lane = onesided::LaneKind::kControl;
  links[right_rank_].out.push_back(std::move(data_out));
  links[left_rank_].out.push_back(
      {layout::kCallsRing, layout::kCallSlots, layout::kDescriptorBytes, /*stage_sends=*/true,
       onesided::LaneKind::kControl,
       absl::StrCat("rank ", left_rank_, " (the left neighbour, call descriptors)")});
  links[left_rank_].in.push_back(
      {layout::kDataRing, options_.slots, options_.chunk_bytes, false,
       onesided::LaneKind::kControl, left, [this](uint64_t seq) {
         return absl::StrCat("message ", seq - call_first_ + 1, " of ",
                             call_end_ - call_first_, " of this call");
       }});
  links[right_rank_].in.push_back(
      {layout::kCallsRing, layout::kCallSlots, layout::kDescriptorBytes, false,
       onesided::LaneKind::kData, right,
       [](uint64_t seq) { return absl::StrCat("the descriptor of call ", seq); }});
  // Every record published before any wait on a neighbour.
  for (auto& [neighbour, options] : links) {
    ASSIGN_OR_RETURN(std::unique_ptr<onesided::SlotLink> link,
                     onesided::SlotLink::Create(links_, std::move(options)));
    if (neighbour == right_rank_) right_link_ = link.get();
    if (neighbour == left_rank_) left_link_ = link.get();
    slot_links_.push_back(std::move(link));
  }
  ASSIGN_OR_RETURN(std::vector<onesided::PeerRegions> theirs,
                   links_.Exchange({absl::StrCat("ring/", options_.name),
                                    Layout(options_, members_),
                                    {{"data", data_.get()}, {"control", control_.get()}}},
                                   {right_rank_, left_rank_}, Where()));
  for (const onesided::PeerRegions& peer : theirs) {
    RETURN_IF_ERROR(onesided::CheckRegionBytes(peer.regions[0], options_.capacity_bytes,
                                               "its data region", Where()));
    RETURN_IF_ERROR(onesided::CheckRegionBytes(peer.regions[1], layout::ControlBytes(),
                                               "its control region", Where()));
    if (peer.rank == right_rank_) {
      right_data_ = peer.regions[0];
      right_control_ = peer.regions[1];
    }
    if (peer.rank == left_rank_) left_control_ = peer.regions[1];
  }
  for (auto& link : slot_links_) RETURN_IF_ERROR(link->Connect(Where()));
  ASSIGN_OR_RETURN(right_endpoint_, links_.Lane(right_rank_));
  ASSIGN_OR_RETURN(left_endpoint_, links_.Lane(left_rank_, onesided::LaneKind::kControl));
  ASSIGN_OR_RETURN(right_flag_endpoint_, links_.Lane(right_rank_, onesided::LaneKind::kControl));
  // The neighbours' keys now, while they hold their regions (Prepare()).
  RETURN_IF_ERROR(right_endpoint_->Prepare(right_data_));
  RETURN_IF_ERROR(right_endpoint_->Prepare(right_control_));
  RETURN_IF_ERROR(left_endpoint_->Prepare(left_control_));
  data_out_ = right_link_->out_index(layout::kDataRing);
  data_in_ = left_link_->in_index(layout::kDataRing);
  calls_out_ = left_link_->out_index(layout::kCallsRing);
  calls_in_ = right_link_->in_index(layout::kCallsRing);
  sender_ = &right_link_->sender(data_out_);
  receiver_ = &left_link_->receiver(data_in_);
  descriptor_sender_ = &left_link_->sender(calls_out_);
  descriptor_receiver_ = &right_link_->receiver(calls_in_);
  return absl::OkStatus();
}

void RingAllReduce::Fail(absl::Status status) {
  if (failure_.ok()) failure_ = std::move(status);
}

absl::Status RingAllReduce::failure() const {
  if (!failure_.ok()) return failure_;
  for (const auto& link : slot_links_) {
    if (absl::Status failed = link->failure(); !failed.ok()) return failed;
  }
  return absl::OkStatus();
}

int64_t RingAllReduce::in_flight() const {
  int64_t total = outstanding_;
  for (const auto& link : slot_links_) total += link->in_flight();
  return total;
}

absl::Status RingAllReduce::AllReduce(size_t offset, size_t count, DataType type,
                                      ReduceOp op, uint8_t variant) {
  const size_t element = ElementSize(type);
  // A range refused here is refused on this member only (each has an
  // offset of its own): the ring gives the call up, so the others fail it
  // too instead of pairing it with our next call.
  if (offset % element != 0) {
    return Abandon(absl::InvalidArgumentError(absl::StrCat(
        Where(), ": offset ", offset, " is not a multiple of the ",
        DataTypeName(type), " element size ", element)));
  }
  if (offset > options_.capacity_bytes ||
      count > (options_.capacity_bytes - offset) / element) {
    return Abandon(absl::OutOfRangeError(absl::StrCat(
        Where(), ": ", count, " ", DataTypeName(type), " elements at offset ",
        offset, " do not fit its ", options_.capacity_bytes, "-byte data region")));
  }
  if (!failure_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        Where(), " is unusable after an earlier error: ", failure_.message()));
  }
  ++stats_.calls;
  if (size() == 1) return absl::OkStatus();

  // An empty call too: its messages are empty, but its descriptor is
  // checked like any other, so a member whose count is not 0 gets an error
  // instead of pairing with the member's next call.
  RingSchedule schedule(size(), position_, count, options_.chunk_bytes / element);
  Call call{schedule, offset, count, element, type, op,
            call_word::Pack(call_word::kAllReduce, -1, type, op, variant), next_call_++,
            next_seq_, next_seq_ + schedule.messages(),
            std::min<uint64_t>(options_.slots,
                               static_cast<uint64_t>(size() - 1) * schedule.pieces())};
  next_seq_ = call.end;
  call_first_ = call.first;
  call_end_ = call.end;

  const int neighbours[] = {left_rank_, right_rank_};
  absl::Status waited = loop_->WaitForProgress(
      [&](bool& moved) -> absl::Status {
        RETURN_IF_ERROR(Turn(call, moved));
        if (moved) {
          // Heard from both: their watches wait a full interval again.
          links_.Rearm(left_rank_);
          links_.Rearm(right_rank_);
        }
        return absl::OkStatus();
      },
      [&] {
        return receiver_->received() >= call.end && sender_->delivered() >= call.end &&
               call.described && call.right_known;
      },
      options_.timeout,
      [&] {
        std::string waiting;
        if (!call.described) {
          waiting = absl::StrCat("room to send rank ", left_rank_, " the descriptor of call ",
                                 call.number);
        } else if (!call.right_known && sender_->claimed() - call.first >= Unchecked(call)) {
          waiting = absl::StrCat("the descriptor of call ", call.number, " from rank ",
                                 right_rank_);
        } else if (receiver_->received() < call.end) {
          waiting = absl::StrCat("message ", receiver_->received() - call.first + 1, " of ",
                                 call.end - call.first, " from rank ", left_rank_);
        } else {
          waiting = absl::StrCat("its writes to rank ", right_rank_, " to complete (",
                                 sender_->delivered() - call.first, " of ",
                                 call.end - call.first, " done)");
        }
        return absl::StrCat(waiting, "; rank ", right_rank_, " released ",
                            sender_->credit_seen(),
                            " messages. Do all members run the same all-reduce calls?");
      },
      neighbours, options_.wait);
  if (!waited.ok()) {
    Fail(waited);  // later calls quote it after Where()
    GiveUp();
    return Annotate(waited, Where());
  }
  stats_.messages += call.end - call.first;
  // Release the last messages now, so the left neighbour's next call
  // need not wait for ours.
  if (absl::Status credit = PostCredit(); !credit.ok()) {
    Fail(credit);
    GiveUp();
    return Annotate(credit, Where());
  }
  return absl::OkStatus();
}

absl::Status RingAllReduce::Abandon(absl::Status why) {
  // After the Shutdown() barrier the neighbours may have let their control
  // regions go: nothing more is written there.
  if (size() > 1 && failure_.ok() && !quiesced_) {
    Fail(why);
    PostAbort(next_call_);
    GiveUp();
  }
  return why;
}

uint64_t RingAllReduce::Unchecked(const Call& call) const {
  // A message numbered at least n - 1 waits for the right neighbour's
  // descriptor. Every receiver's all-gather starts at (n - 1) x its pieces,
  // so none takes a message its sender did not check as all-gather, and a
  // member finishes a call only once every neighbouring pair matched
  // (docs/collectives.md, "Call descriptors").
  return std::min<uint64_t>(call.end - call.first, static_cast<uint64_t>(size() - 1));
}

void RingAllReduce::GiveUp() {
  if (fenced_) return;
  fenced_ = true;
  // Never posted.
  if (sender_ != nullptr) sender_->DropQueued();
  if (descriptor_sender_ != nullptr) descriptor_sender_->DropQueued();
  if (loop_ == nullptr) return;  // never connected: nothing posted
  // Abort words that found a full queue are posted while we wait.
  links_.Fence({right_rank_, left_rank_},
               [&] {
                 RetryAborts();
                 return in_flight() == 0 && aborts_due_.empty();
               },
               absl::Now() + std::min(options_.timeout, absl::Seconds(5)), Where() + " gave up");
}

absl::Status RingAllReduce::Turn(Call& call, bool& progressed) {
  // Progress is the ring's own: a write completing, a message arriving or
  // leaving. Other completions (liveness probes answered by a neighbour
  // that is alive but not calling, other users of the transport) are not.
  const uint64_t delivered_before = sender_->delivered();
  absl::StatusOr<int> fired = loop_->Poll();  // the transport's, and its other protocols'
  if (!fired.ok()) return fired.status();
  if (sender_->delivered() != delivered_before) progressed = true;
  RETURN_IF_ERROR(failure());
  RETURN_IF_ERROR(CheckAborts(call));
  RETURN_IF_ERROR(Describe(call, progressed));
  RETURN_IF_ERROR(LearnRight(call, progressed));
  RETURN_IF_ERROR(Receive(call, progressed));
  RETURN_IF_ERROR(StartSends(call, progressed));
  RETURN_IF_ERROR(sender_->Post());
  RETURN_IF_ERROR(descriptor_sender_->Post());
  return PostCredit();
}

absl::Status RingAllReduce::Describe(Call& call, bool& progressed) {
  if (call.described) return absl::OkStatus();
  ASSIGN_OR_RETURN(const bool room, descriptor_sender_->HasRoom());
  if (!room) return absl::OkStatus();
  const uint64_t number = call.number;
  if (descriptor_sender_->claimed() != number) {
    return absl::InternalError(absl::StrCat("call ", number, " would send descriptor ",
                                            descriptor_sender_->claimed()));
  }
  // Its source slot is free once the write of two calls ago has completed.
  if (number >= layout::kCallSlots &&
      descriptor_sender_->written() < number - layout::kCallSlots + 1) {
    return absl::OkStatus();
  }
  const int calls = calls_out_;
  const size_t slot = descriptor_sender_->slot(number);
  const uint64_t words[4] = {call.offset, call.count, call.word, number};
  std::memcpy(left_link_->staging(calls, slot), words, sizeof(words));
  descriptor_sender_->Claim();
  descriptor_sender_->Write(number,
                            left_link_->staged(calls, slot, 0, layout::kDescriptorBytes),
                            left_link_->destination(calls, slot, 0, layout::kDescriptorBytes));
  descriptor_sender_->Commit(number);
  call.described = true;
  progressed = true;
  return absl::OkStatus();
}

absl::Status RingAllReduce::LearnRight(Call& call, bool& progressed) {
  if (call.right_known) return absl::OkStatus();
  ASSIGN_OR_RETURN(const bool arrived, descriptor_receiver_->Arrived());
  if (!arrived) return absl::OkStatus();
  // The neighbour may rewrite its descriptor: one copy, checked and used.
  uint64_t theirs[4];
  std::memcpy(theirs,
              right_link_->received(calls_in_, descriptor_receiver_->slot()),
              sizeof(theirs));
  descriptor_receiver_->Consume();
  progressed = true;
  const std::string right = absl::StrCat("rank ", right_rank_, " (the right neighbour)");
  if (theirs[3] != call.number) {
    PostAbort(call.number);
    return absl::DataLossError(absl::StrCat(
        right, " wrote a call descriptor numbered ", theirs[3], " where call ", call.number,
        "'s was due (does every member run the same rdmaflow version? does anything else "
        "write into this rank's memory?)"));
  }
  if (theirs[1] != call.count || theirs[2] != call.word) {
    PostAbort(call.number);
    return absl::AbortedError(absl::StrCat(
        "call ", call.number, " differs between neighbours: ", right, " called ",
        call_word::Describe(theirs[0], theirs[1], theirs[2]), ", rank ", rank(), " called ",
        call_word::Describe(call.offset, call.count, call.word),
        "; every member must make the same all-reduces (count, type, operator and the "
        "caller's variant), in the same order. The call fails on every member, and the ring "
        "is unusable"));
  }
  // Where the neighbour's range lies: its count is ours, so only the
  // offset is new.
  const uint64_t offset = theirs[0];
  if (offset % call.element_size != 0 || offset > options_.capacity_bytes ||
      call.count > (options_.capacity_bytes - offset) / call.element_size) {
    PostAbort(call.number);
    return absl::DataLossError(absl::StrCat(
        right, " described call ", call.number, " with ", call.count, " elements at offset ",
        offset, ", which is not an aligned range of its ", options_.capacity_bytes,
        "-byte data region"));
  }
  call.right_offset = offset;
  call.right_known = true;
  return absl::OkStatus();
}

absl::Status RingAllReduce::CheckAborts(Call& call) {
  for (const bool from_left : {true, false}) {
    const uint64_t word = LoadSharedWord(control_->data() + layout::Abort(from_left));
    // A neighbour may give up a call we are still finishing the one
    // before of (our last writes in flight): it counts from that call on.
    if (word == 0 || word - 1 > call.number) continue;
    PostAbort(call.number);  // on round the ring
    return absl::AbortedError(absl::StrCat(
        "rank ", from_left ? left_rank_ : right_rank_, " (the ",
        from_left ? "left" : "right", " neighbour) gave up call ", word - 1,
        ": two members' calls differ, a descriptor was forged, or a member refused or "
        "could not make its call (the error of the member that saw it says which). The "
        "call fails on every member, and the ring is unusable"));
  }
  return absl::OkStatus();
}

void RingAllReduce::PostAbort(uint64_t number) {
  if (abort_posted_ || right_endpoint_ == nullptr) return;
  abort_posted_ = true;
  const uint64_t value = number + 1;
  std::memcpy(control_->data() + layout::AbortSource(), &value, sizeof(value));
  aborts_due_ = {true, false};  // to the right neighbour, to the left one
  RetryAborts();
}

void RingAllReduce::RetryAborts() {
  for (size_t i = 0; i < aborts_due_.size();) {
    // We are the right neighbour's left one, and the left one's right one.
    const bool to_right = aborts_due_[i];
    rdma::Endpoint* endpoint = to_right ? right_endpoint_ : left_endpoint_;
    const rdma::RemoteRegion* control = to_right ? &right_control_ : &left_control_;
    absl::Status posted = endpoint->PostWrite(
        {control_.get(), layout::AbortSource(), sizeof(uint64_t)},
        {control, layout::Abort(/*from_left=*/to_right), sizeof(uint64_t)},
        std::nullopt, Guarded([this](absl::Status) { --outstanding_; }));
    if (absl::IsResourceExhausted(posted)) {
      ++i;  // the queue is full: again after progress
      continue;
    }
    // Posted, or refused for good (a neighbour we cannot tell fails by its
    // own timeout).
    if (posted.ok()) ++outstanding_;
    aborts_due_.erase(aborts_due_.begin() + i);
  }
}

absl::Status RingAllReduce::Receive(Call& call, bool& progressed) {
  while (receiver_->received() < call.end) {
    ASSIGN_OR_RETURN(const bool arrived, receiver_->Arrived());
    if (!arrived) return absl::OkStatus();
    const uint64_t seq = receiver_->received();
    const size_t message = seq - call.first;
    const ElementRange range = call.schedule.Received(message);
    const std::byte* staged =
        left_link_->received(data_in_, receiver_->slot());
    std::byte* at = data_->data() + call.offset + range.begin * call.element_size;
    if (range.count == 0) {
      // Nothing to take.
    } else if (call.schedule.is_reduce(message)) {
      Reduce(call.type, call.op, at, staged, range.count);
    } else if (GatherInSlots(call.offset, call, range)) {
      std::memcpy(at, staged, range.count * call.element_size);
    }
    receiver_->Consume();
    progressed = true;
  }
  return absl::OkStatus();
}

absl::Status RingAllReduce::StartSends(Call& call, bool& progressed) {
  const uint64_t pieces = call.schedule.pieces();
  while (sender_->claimed() < call.end) {
    const uint64_t seq = sender_->claimed();
    // A forwarded piece must have arrived (and been reduced) first.
    if (seq - call.first >= pieces && receiver_->received() < seq - pieces + 1) {
      return absl::OkStatus();
    }
    const size_t message = seq - call.first;
    // The neighbour's call is checked before we send it what it could take
    // as all-gather; the all-gather also needs to know where its range lies.
    const bool reduce = call.schedule.is_reduce(message);
    if (message >= Unchecked(call) && !call.right_known) return absl::OkStatus();
    // The receiver's slot (and, for the all-gather, its buffer) is free:
    // the right neighbour's credit, checked by the slot ring.
    ASSIGN_OR_RETURN(const bool room, sender_->HasRoom(call.window));
    if (!room) return absl::OkStatus();
    sender_->Claim();
    const ElementRange range = call.schedule.Sent(message);
    const size_t bytes = range.count * call.element_size;
    if (bytes > 0) {
      const size_t at = call.offset + range.begin * call.element_size;
      const rdma::RemoteSlice dst =
          reduce || GatherInSlots(call.right_offset, call, range)
              ? right_link_->destination(data_out_, sender_->slot(seq), 0, bytes)
              : rdma::RemoteSlice{&right_data_,
                                  call.right_offset + range.begin * call.element_size, bytes};
      sender_->Write(seq, {data_.get(), at, bytes}, dst);
      stats_.bytes_sent += bytes;
    }
    sender_->Commit(seq, /*had_writes=*/bytes > 0);
    progressed = true;
  }
  return absl::OkStatus();
}

bool RingAllReduce::GatherInSlots(size_t offset, const Call& call,
                                  const ElementRange& range) const {
  // The same range and the receiver's offset on both ends of a link (the
  // sender's Sent(), the receiver's Received()), so both take the same way.
  return offset + (range.begin + range.count) * call.element_size >
         options_.gather_in_slots_from;
}

absl::Status RingAllReduce::PostCredit() {
  // A slot is free once its message was consumed, and, as the all-gather
  // writes straight into our data region, once what we forward from it has
  // landed at the right neighbour.
  RETURN_IF_ERROR(
      receiver_->PostCredit(std::min(receiver_->received(), sender_->delivered())));
  return descriptor_receiver_->PostCredit();
}

absl::Status RingAllReduce::JoinLoop() {
  loop_ = &links_.loop();
  // A neighbour whose probe fails fails the ring (kUnavailable).
  auto fail = [this](int, const absl::Status& status) { Fail(status); };
  for (int neighbour : {right_rank_, left_rank_}) {
    if (!watches_.empty() && neighbour == right_rank_) continue;  // 2 members
    ASSIGN_OR_RETURN(const int64_t watch, links_.Subscribe(neighbour, fail));
    watches_.push_back(watch);
  }
  return absl::OkStatus();
}

absl::Status RingAllReduce::Shutdown(std::optional<absl::Duration> timeout) {
  const absl::Duration limit = timeout.value_or(options_.timeout);
  if (size() > 1) {
    const absl::Time deadline = absl::Now() + limit;
    // Our last writes must be visible at the neighbours, not only complete
    // here, before we tell them at the barrier that we are done.
    std::vector<rdma::Endpoint*> to_flush;
    if (failure().ok()) {
      to_flush.push_back(right_endpoint_);
      if (left_endpoint_ != nullptr) to_flush.push_back(left_endpoint_);
      // The data's flags (on the left one's lane too with 2 members).
      if (right_flag_endpoint_ != nullptr && right_flag_endpoint_ != left_endpoint_) {
        to_flush.push_back(right_flag_endpoint_);
      }
    }
    // Posting happens between the loop's rounds; a failure ends the wait.
    absl::Status trouble;
    absl::Status drained = loop_->WaitUntil(
        [&] {
          if (trouble = failure(); !trouble.ok()) return true;
          if (trouble = sender_->Post(); !trouble.ok()) return true;
          if (trouble = descriptor_sender_->Post(); !trouble.ok()) return true;
          while (!to_flush.empty()) {
            absl::Status posted = to_flush.back()->PostFlush(Guarded([this](absl::Status s) {
              --outstanding_;
              if (!s.ok()) Fail(s);
            }));
            if (absl::IsResourceExhausted(posted)) break;  // retry after progress
            if (!posted.ok()) {
              Fail(posted);
              trouble = posted;
              return true;
            }
            ++outstanding_;
            to_flush.pop_back();
          }
          return in_flight() == 0 && sender_->idle() && descriptor_sender_->idle() &&
                 to_flush.empty();
        },
        deadline,
        [&] { return absl::StrCat(in_flight(), " writes still in flight at shutdown"); }, {},
        options_.wait);
    if (!trouble.ok()) return Annotate(trouble, Where());
    if (!drained.ok()) return Annotate(drained, Where());
  }
  const std::string name = absl::StrCat("ring/", options_.name, "/shutdown");
  absl::Status barrier =
      loop_ != nullptr
          ? onesided::Barrier(*loop_, links_.store(), links_.ns(), name, size(), limit)
          : rdma::Barrier(links_.store(), links_.ns(), name, size(), limit);
  if (!barrier.ok()) return Annotate(barrier, Where());
  // Every member has stopped writing into our memory: it may be freed.
  quiesced_ = true;
  return absl::OkStatus();
}

}  // namespace rdmaflow::collectives
