#include "onesided/messenger.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/annotate.h"
#include "common/status_macros.h"
#include "rdma/rendezvous.h"
#include "onesided/internal/piece_header.h"

namespace rdmaflow::onesided {
namespace {

using internal::PieceHeader;

constexpr size_t kHeaderBytes = internal::kPieceHeaderBytes;

std::string Layout(const MessengerOptions& o, int world) {
  // The version names the wire protocol (piece header, slot link).
  return absl::StrCat("messenger v2: slots=", o.slots, " slot_bytes=", o.slot_bytes,
                      " world=", world, " members=",
                      o.members.empty() ? std::string("all") : absl::StrJoin(o.members, ","));
}

bool IsMember(const MessengerOptions& o, int rank) {
  return o.members.empty() || std::find(o.members.begin(), o.members.end(), rank) !=
                                  o.members.end();
}

PieceHeader ReadHeader(const std::byte* slot) {
  PieceHeader header;
  std::memcpy(&header, slot, sizeof(header));
  return header;
}

// Runs a completion once and leaves it empty.
template <typename Done, typename Value>
void Fire(Done& done, Value&& value) {
  if (!done) return;
  Done run = std::move(done);
  done = nullptr;
  std::move(run)(std::forward<Value>(value));
}

// kInvalidArgument for options or ranks no messenger can run with.
absl::Status CheckOptions(const MessengerOptions& options, int rank, int world) {
  if (world < 1 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "messenger: rank ", rank, " is outside a world of ", world));
  }
  std::vector<int> sorted = options.members;
  std::sort(sorted.begin(), sorted.end());
  if (!options.members.empty() &&
      (sorted.front() < 0 || sorted.back() >= world ||
       std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end() ||
       !IsMember(options, rank))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "messenger '", options.name, "': members (", absl::StrJoin(options.members, ","),
        ") must be distinct ranks of a world of ", world, " and include rank ", rank));
  }
  if (options.slots < 1 || options.slot_bytes == 0 || options.slot_bytes % 64 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "messenger '", options.name, "': slots (", options.slots,
        ") must be >= 1 and slot_bytes (", options.slot_bytes,
        ") a positive multiple of 64"));
  }
  if (absl::Status valid = options.wait.Validate(); !valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("messenger '", options.name, "': ", valid.message()));
  }
  if (options.liveness_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "messenger '", options.name, "': liveness_interval must be positive, not ",
        absl::FormatDuration(options.liveness_interval)));
  }
  return absl::OkStatus();
}

}  // namespace

struct Messenger::Outgoing {
  OpId id;
  uint64_t tag;
  const std::byte* data;   // the caller's, until abandoned
  size_t bytes;
  size_t next_offset = 0;  // first byte not yet cut into a piece
  uint64_t last_seq = 0;   // the piece that completes it, once cut
  bool all_cut = false;
  // Abandoned: bytes [copied_from, bytes) of the message, copied out of
  // the caller's buffer before it was given back.
  std::string copy;
  size_t copied_from = 0;
  bool abandoned = false;
  // Pieces [zero_copy_first, zero_copy_end) are written from a send
  // region, where the caller's bytes lie (zero_copy_end 0: none).
  uint64_t zero_copy_first = 0;
  uint64_t zero_copy_end = 0;
  SendDone done;

  const std::byte* Source(size_t offset) const {
    if (abandoned) {
      return reinterpret_cast<const std::byte*>(copy.data()) + (offset - copied_from);
    }
    return data + offset;
  }
};

struct Messenger::Incoming {
  // Returns its buffer's bytes to the messenger's unexpected budget.
  explicit Incoming(size_t* budget) : budget(budget) {}
  ~Incoming() { *budget -= buffer.size(); }
  Incoming(const Incoming&) = delete;
  Incoming& operator=(const Incoming&) = delete;

  size_t* const budget;
  OpId id = 0;               // of the receive posted for it
  uint64_t tag = 0;
  std::byte* dst = nullptr;  // a posted receive's buffer
  size_t capacity = 0;
  std::string buffer;        // an unexpected message's copy
  bool buffered = false;     // pieces go to `buffer`, not `dst`
  size_t message_bytes = 0;
  size_t arrived = 0;
  bool complete = false;
  bool too_large = false;
  // Abandoned by its receive: consumes its message, keeps nothing.
  bool discard = false;
  RecvDone done;             // set once a receive is posted for it

  bool waited_on() const { return static_cast<bool>(done); }
  void Unbuffer() {
    *budget -= buffer.size();
    std::string().swap(buffer);
  }
};

struct Messenger::Peer {
  int rank;
  rdma::Endpoint* endpoint = nullptr;  // the links' data lane to it
  // The slot link to it (onesided/slots/slot_link.h): one ring of pieces
  // each way, laid out by the link.
  std::unique_ptr<SlotLink> link;
  absl::Status status;         // not OK once declared dead

  // The link's slot rings (onesided/slots/slot_ring.h): pieces to the
  // peer, pieces from it. Sequence numbers count pieces.
  SlotRingSender* sender = nullptr;
  SlotRingReceiver* receiver = nullptr;

  // Sending to the peer.
  std::deque<std::unique_ptr<Outgoing>> outgoing;  // front: being cut
  std::deque<std::unique_ptr<Outgoing>> cut;       // all pieces posted

  // Receiving from the peer.
  std::list<std::unique_ptr<Incoming>> posted;   // receives not yet matched
  // Messages whose first piece has arrived: unexpected ones (no receive
  // yet; kept once whole until one comes) and matched ones still arriving.
  std::list<std::unique_ptr<Incoming>> arrived;
  Incoming* current = nullptr;  // the message the next piece continues

  int64_t watch = 0;  // its subscription to the links' watch of the peer

  int64_t in_flight() const { return link != nullptr ? link->in_flight() : 0; }

  // Something waits on the peer: a send not yet landed, a message arriving,
  // a posted receive. Only then is it probed for liveness.
  bool waited_on() const {
    if (!outgoing.empty() || !cut.empty() || current != nullptr) return true;
    for (const auto& message : posted) {
      if (message->waited_on()) return true;
    }
    for (const auto& message : arrived) {
      if (message->waited_on()) return true;
    }
    return false;
  }
};

Messenger::Messenger(PeerLinks& links, int world, const MessengerOptions& options)
    : links_(&links),
      transport_(links.transport()),
      rank_(links.rank()),
      world_(world),
      options_(options) {}

Messenger::~Messenger() {
  closing_ = true;
  if (loop_ != nullptr) {
    if (own_.loop == nullptr) loop_->CheckOnLoopThread(Where() + "'s destructor");
    if (loop_->OnLoopThread()) {
      loop_->RemoveHandler(handler_);
      for (auto& peer : peers_) {
        if (peer != nullptr && peer->watch != 0) links_->Unsubscribe(peer->watch);
      }
    }
    // Completions capture `this`: let those in flight fire before it goes;
    // the peers whose operations hang are severed, which cancels them.
    std::vector<int> busy;
    for (auto& peer : peers_) {
      if (peer != nullptr && peer->in_flight() > 0) busy.push_back(peer->rank);
    }
    links_->Fence(
        busy,
        [&] {
          for (auto& peer : peers_) {
            if (peer != nullptr && peer->in_flight() > 0) return false;
          }
          return true;
        },
        absl::Now() + absl::Seconds(2), absl::StrCat(Where(), " is closing"));
  }
  bool leak = false;
  for (auto& peer : peers_) {
    if (peer == nullptr || peer->in_flight() == 0) continue;
    // A completion that never came may still fire: leave what it points at.
    std::fprintf(stderr, "%s: %lld operations to rank %d never completed\n", Where().c_str(),
                 static_cast<long long>(peer->in_flight()), peer->rank);
    // (The link leaves its memory and halves in place: slot_link.h.)
    peer->link.reset();
    peer.release();
    leak = true;
  }
  if (leak) {
    // ... and, when the links are its own, the endpoints those operations
    // were posted on (shared links severed those peers in the fence above).
    own_.links.release();
  }
  own_.links.reset();
  own_.loop.reset();
}

std::string Messenger::Where() const {
  return absl::StrCat("messenger '", options_.name, "' on rank ", rank_);
}

absl::StatusOr<std::unique_ptr<Messenger>> Messenger::Create(
    rdma::Transport& transport, rdma::Store& store, const std::string& ns,
    int rank, int world, const MessengerOptions& options) {
  RETURN_IF_ERROR(CheckOptions(options, rank, world));
  if (rank != transport.rank()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "messenger '", options.name, "': rank ", rank, " is not its transport's (",
        transport.rank(), ")"));
  }
  ProgressLoopOptions loop_options;
  loop_options.name = absl::StrCat("rank ", rank);
  loop_options.wait = options.wait;
  loop_options.liveness_interval = options.liveness_interval;
  ASSIGN_OR_RETURN(OwnLinks own,
                   MakeOwnLinks(transport, store, ns, options.loop, loop_options, options.timeout,
                                absl::StrCat("messenger '", options.name, "'")));
  MessengerOptions on_links = options;
  on_links.loop = &own.links->loop();
  ASSIGN_OR_RETURN(std::unique_ptr<Messenger> messenger, Create(*own.links, world, on_links));
  messenger->own_ = std::move(own);
  return messenger;
}

absl::StatusOr<std::unique_ptr<Messenger>> Messenger::Create(
    PeerLinks& links, int world, const MessengerOptions& options) {
  const int rank = links.rank();
  RETURN_IF_ERROR(CheckOptions(options, rank, world));
  if (options.loop != nullptr && options.loop != &links.loop()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "messenger '", options.name, "': options.loop is not the loop of its links"));
  }
  if (!links.loop().OnLoopThread()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "messenger '", options.name, "': its progress loop belongs to another thread "
        "(docs/thread_model.md)"));
  }
  std::unique_ptr<Messenger> messenger(new Messenger(links, world, options));
  messenger->peers_.resize(world);
  RETURN_IF_ERROR(messenger->Connect());
  RETURN_IF_ERROR(messenger->JoinLoop());
  return messenger;
}

absl::Status Messenger::JoinLoop() {
  loop_ = &links_->loop();
  handler_ = loop_->AddRoundHandler([this] { return Pass(); });
  for (auto& peer : peers_) {
    if (peer == nullptr) continue;
    // A probe that fails: what it wrote before it went is still delivered.
    ASSIGN_OR_RETURN(peer->watch,
                     links_->Subscribe(peer->rank, [this](int rank, const absl::Status& status) {
                       PeerDied(*peers_[rank], status);
                     }));
  }
  return absl::OkStatus();
}

absl::Status Messenger::Connect() {
  // Every link published before any waits on its peer (slot_link.h).
  for (int rank = 0; rank < world_; ++rank) {
    if (rank == rank_ || !IsMember(options_, rank)) continue;
    auto peer = std::make_unique<Peer>();
    peer->rank = rank;
    SlotLinkOptions link;
    link.scope = absl::StrCat("messenger/", options_.name);
    link.layout = Layout(options_, world_);
    link.peer = rank;
    // One ring of pieces each way; "it" in the rings' messages: FailPeer()
    // names the rank.
    link.out.push_back({"pieces", options_.slots, slot_stride(), /*stage_sends=*/true,
                        LaneKind::kData, "it"});
    link.in.push_back({"pieces", options_.slots, slot_stride(), false, LaneKind::kData, "it",
                       [](uint64_t seq) { return absl::StrCat("piece ", seq); }});
    ASSIGN_OR_RETURN(peer->link, SlotLink::Create(*links_, std::move(link)));
    peers_[rank] = std::move(peer);
  }
  for (auto& peer : peers_) {
    if (peer == nullptr) continue;
    RETURN_IF_ERROR(peer->link->Connect(Where()));
    peer->endpoint = peer->link->out_endpoint(0);
    peer->sender = &peer->link->sender(0);
    peer->receiver = &peer->link->receiver(0);
  }
  return absl::OkStatus();
}

std::vector<int> Messenger::members() const {
  if (!options_.members.empty()) return options_.members;
  std::vector<int> all(world_);
  for (int rank = 0; rank < world_; ++rank) all[rank] = rank;
  return all;
}

void Messenger::AddSendRegion(const rdma::MemoryRegion* region) {
  send_regions_.push_back(region);
}

const rdma::MemoryRegion* Messenger::SendRegionOf(const void* data,
                                                  size_t bytes) const {
  const auto* begin = static_cast<const std::byte*>(data);
  for (const rdma::MemoryRegion* region : send_regions_) {
    if (begin >= region->data() && begin + bytes <= region->data() + region->size()) {
      return region;
    }
  }
  return nullptr;
}

absl::Status Messenger::PeerStatus(int peer) const {
  if (peer < 0 || peer >= world_ || peers_[peer] == nullptr) return absl::OkStatus();
  return peers_[peer]->status;
}

bool Messenger::idle() const {
  for (const auto& peer : peers_) {
    if (peer == nullptr) continue;
    // Abandoned sends still have to go out; abandoned receives may never
    // see their message.
    if (!peer->outgoing.empty() || !peer->cut.empty()) return false;
    for (const auto* list : {&peer->posted, &peer->arrived}) {
      for (const auto& message : *list) {
        if (message->waited_on()) return false;
      }
    }
  }
  return true;
}

absl::StatusOr<Messenger::OpId> Messenger::Send(int peer, uint64_t tag,
                                                const void* data, size_t bytes,
                                                SendDone done) {
  if (peer < 0 || peer >= world_ || peers_[peer] == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(), ": cannot send to rank ", peer, " (world of ", world_,
        options_.members.empty() ? "" : absl::StrCat(", members ", absl::StrJoin(options_.members, ",")),
        "; a rank does not send to itself)"));
  }
  if (data == nullptr && bytes > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(), ": send of ", bytes, " bytes to rank ", peer, " from a null buffer"));
  }
  Peer& p = *peers_[peer];
  if (!p.status.ok()) return p.status;
  auto message = std::make_unique<Outgoing>();
  message->id = next_op_++;
  message->tag = tag;
  message->data = static_cast<const std::byte*>(data);
  message->bytes = bytes;
  message->done = std::move(done);
  const OpId id = message->id;
  p.outgoing.push_back(std::move(message));
  return id;
}

absl::StatusOr<Messenger::OpId> Messenger::Recv(int peer, uint64_t tag, void* dst,
                                                size_t bytes, RecvDone done) {
  if (peer < 0 || peer >= world_ || peers_[peer] == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(), ": cannot receive from rank ", peer, " (world of ", world_,
        options_.members.empty() ? "" : absl::StrCat(", members ", absl::StrJoin(options_.members, ",")),
        "; a rank does not receive from itself)"));
  }
  if (dst == nullptr && bytes > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(), ": receive of up to ", bytes, " bytes from rank ", peer,
        " into a null buffer"));
  }
  Peer& p = *peers_[peer];
  const OpId id = next_op_++;
  // A message that arrived first (whole or in part) is the match. (While a
  // receive of the tag is posted, none has arrived unmatched: Deliver()
  // gives each new message to the first posted receive of its tag.)
  for (auto it = p.arrived.begin(); it != p.arrived.end(); ++it) {
    Incoming& message = **it;
    if (message.tag != tag || message.waited_on() || message.discard) continue;
    if (message.complete) {
      std::unique_ptr<Incoming> owned = std::move(*it);
      p.arrived.erase(it);
      if (owned->message_bytes > bytes) {
        std::move(done)(absl::InvalidArgumentError(absl::StrCat(
            Where(), ": message from rank ", peer, " (tag ", tag, ") has ",
            owned->message_bytes, " bytes, the receive room for ", bytes)));
      } else {
        if (owned->message_bytes > 0) {
          std::memcpy(dst, owned->buffer.data(), owned->message_bytes);
        }
        std::move(done)(owned->message_bytes);
      }
      return id;
    }
    // Still arriving: finish it in its buffer, then copy.
    message.id = id;
    message.capacity = bytes;
    message.dst = static_cast<std::byte*>(dst);
    message.done = std::move(done);
    return id;
  }
  if (!p.status.ok()) return p.status;
  auto message = std::make_unique<Incoming>(&unexpected_bytes_);
  message->id = id;
  message->tag = tag;
  message->dst = static_cast<std::byte*>(dst);
  message->capacity = bytes;
  message->done = std::move(done);
  p.posted.push_back(std::move(message));
  return id;
}

void Messenger::Abandon(OpId op, const absl::Status& why) {
  for (auto& peer : peers_) {
    if (peer == nullptr) continue;
    for (auto* queue : {&peer->outgoing, &peer->cut}) {
      for (auto& message : *queue) {
        if (message->id != op || message->abandoned) continue;
        // What is not yet cut into pieces is copied; cut pieces are
        // already staged (or lie in a send region, which outlives us).
        message->copy.assign(reinterpret_cast<const char*>(message->data) +
                                 message->next_offset,
                             message->bytes - message->next_offset);
        message->copied_from = message->next_offset;
        message->abandoned = true;
        message->data = nullptr;
        ++stats_.abandoned;
        // Taken out first: taking the send region back progresses the
        // transport, whose completions may fail the peer (a probe), and
        // FailPeer() then destroys `message`. It is not touched after.
        SendDone done = std::move(message->done);
        message->done = nullptr;
        const uint64_t first = message->zero_copy_first;
        const uint64_t end = message->zero_copy_end;
        const absl::Status taken =
            end > 0 ? TakeBackSendRegion(*peer, first, end) : absl::OkStatus();
        if (!taken.ok()) {
          // Its writes (and other messages' zero-copy ones) may still read
          // the callers' buffers: the link is closed, which cancels them,
          // before any caller hears that its buffer is free. The sever's
          // news fails the peer (PeerDied) if nothing had.
          links_->Sever(peer->rank, taken);
          FailPeer(*peer, taken);
        }
        Fire(done, why);
        return;
      }
    }
    for (auto* list : {&peer->posted, &peer->arrived}) {
      for (auto& message : *list) {
        if (message->id != op || !message->waited_on()) continue;
        message->discard = true;
        message->dst = nullptr;
        message->capacity = 0;
        message->Unbuffer();
        ++stats_.abandoned;
        // A posted one stays to consume its message; an arriving one is
        // still `current` and is dropped once whole.
        Fire(message->done, why);
        return;
      }
    }
  }
}

absl::Status Messenger::TakeBackSendRegion(Peer& peer, uint64_t first, uint64_t end) {
  // Pieces still queued are written from their staging slot instead (free
  // until the piece is released), with the bytes copied there now.
  SlotLink& link = *peer.link;
  peer.sender->RestageQueued(
      first, end,
      [&](uint64_t seq, rdma::LocalSlice& src) {
        // A header (from staging already), or an empty piece.
        if (src.region == &link.private_region() || src.length == 0) return;
        const size_t slot = peer.sender->slot(seq);
        std::memcpy(link.staging(0, slot) + kHeaderBytes, src.data(), src.length);
        stats_.staged_bytes += src.length;
        src = link.staged(0, slot, kHeaderBytes, src.length);
      });
  // Pieces posted are read by the transport until their flush completes
  // (or, on a failed link, until nothing posted is outstanding).
  const absl::Time deadline = absl::Now() + options_.liveness_interval;
  while (peer.sender->written() < end && peer.sender->outstanding() > 0) {
    // A completion may have failed the peer meanwhile (a probe): its
    // writes are then cancelled by the caller's sever.
    if (!peer.status.ok()) return peer.status;
    if (absl::Now() >= deadline) {
      return absl::UnavailableError(absl::StrCat(
          "the writes of an abandoned send did not complete within ",
          absl::FormatDuration(options_.liveness_interval),
          " (the liveness interval); the link was closed to cancel them"));
    }
    if (absl::StatusOr<int> progressed = transport_.Progress(); !progressed.ok()) {
      return progressed.status();
    }
    (void)peer.sender->Post();
  }
  return absl::OkStatus();
}

absl::Status Messenger::Progress() {
  absl::StatusOr<int> moved = loop_->Poll();
  if (!moved.ok()) return Annotate(moved.status(), Where());
  progressed_ = *moved > 0;
  return absl::OkStatus();
}

bool Messenger::Pass() {
  bool moved = false;
  for (auto& peer : peers_) {
    if (peer == nullptr || !peer->status.ok()) continue;
    const uint64_t received = peer->receiver->received();
    const uint64_t cut = peer->sender->claimed();
    const uint64_t delivered = peer->sender->delivered();
    Receive(*peer);
    StartSends(*peer);
    PostActions(*peer);
    PostCredit(*peer);
    if (!peer->status.ok()) continue;
    if (peer->receiver->received() != received || peer->sender->delivered() != delivered) {
      links_->Rearm(peer->rank);
      moved = true;
    }
    moved |= peer->sender->claimed() != cut;
    // The watch is the links', shared with the other protocols on them: an
    // idle link here leaves its schedule alone (a ring waiting on the peer
    // still needs its probes), and only what we heard rearms it (above).
    if (peer->waited_on()) {
      const int rank[] = {peer->rank};
      loop_->ProbeIfDue(rank);
    }
  }
  return moved;
}

absl::Status Messenger::ProgressUntil(absl::FunctionRef<bool()> done, absl::Time deadline,
                                      absl::string_view what) {
  if (done()) return absl::OkStatus();
  absl::Status waited = loop_->WaitUntil(done, deadline, [&] { return std::string(what); });
  if (waited.ok() || absl::IsDeadlineExceeded(waited)) return waited;
  return Annotate(waited, Where());
}

void Messenger::PeerDied(Peer& peer, absl::Status status) {
  if (!peer.status.ok() || closing_) return;
  // What it wrote before it went (a peer that sent its last message and
  // exited) is still delivered.
  Receive(peer);
  FailPeer(peer, std::move(status));
}

void Messenger::FailPeer(Peer& peer, absl::Status status) {
  if (!peer.status.ok() || closing_) return;
  peer.status = Annotate(status, absl::StrCat(Where(), ": rank ", peer.rank));
  if (absl::IsDataLoss(status)) {
    std::fprintf(stderr, "%s\n", std::string(peer.status.message()).c_str());
  }
  for (auto* queue : {&peer.outgoing, &peer.cut}) {
    for (auto& message : *queue) Fire(message->done, peer.status);
    queue->clear();
  }
  peer.sender->DropQueued();
  for (auto& message : peer.posted) Fire(message->done, peer.status);
  peer.posted.clear();
  for (auto& message : peer.arrived) {
    if (!message->complete) Fire(message->done, peer.status);
  }
  peer.arrived.remove_if([](const auto& m) { return !m->complete || m->discard; });
  peer.current = nullptr;
}

void Messenger::Receive(Peer& peer) {
  while (peer.status.ok()) {
    absl::StatusOr<bool> arrived = peer.receiver->Arrived();
    if (!arrived.ok()) {
      FailPeer(peer, arrived.status());
      return;
    }
    if (!*arrived) break;
    const std::byte* piece = peer.link->received(0, peer.receiver->slot());
    // The header is read out of the peer's reach once: the checked copy is
    // the one every later step uses (the peer may still rewrite the slot).
    const PieceHeader header = ReadHeader(piece);
    if (absl::Status valid = CheckPiece(peer, header); !valid.ok()) {
      FailPeer(peer, std::move(valid));
      return;
    }
    if (MustWait(peer, header)) break;
    Deliver(peer, header, piece + kHeaderBytes);
    peer.receiver->Consume();
  }
}

absl::Status Messenger::CheckPiece(const Peer& peer, const PieceHeader& header) const {
  std::optional<internal::PartialMessage> current;
  if (peer.current != nullptr) {
    current = internal::PartialMessage{peer.current->tag, peer.current->message_bytes,
                                       peer.current->arrived};
  }
  absl::Status valid = internal::CheckPiece(
      header, current.has_value() ? &*current : nullptr, options_.slot_bytes);
  if (valid.ok()) return valid;
  return absl::DataLossError(absl::StrCat(
      "piece ", peer.receiver->received(), " from it: ", valid.message(),
      "; does it run the same rdmaflow version, and is anything else writing "
      "into our memory?"));
}

bool Messenger::MustWait(const Peer& peer, const PieceHeader& h) const {
  if (h.offset != 0) return false;
  for (const auto& posted : peer.posted) {
    if (posted->tag == h.tag) return false;
  }
  // unexpected_bytes_ <= max_unexpected_bytes: no wrap.
  return h.message_bytes > options_.max_unexpected_bytes - unexpected_bytes_;
}

void Messenger::Deliver(Peer& peer, const PieceHeader& header, const std::byte* payload) {
  // CheckPiece() has vouched for `header` (our copy), MustWait() for the
  // budget; only payload bytes are read from the slot.
  if (header.offset == 0) {
    // A new message: the first posted receive of its tag, or arrived.
    std::unique_ptr<Incoming> message;
    for (auto it = peer.posted.begin(); it != peer.posted.end(); ++it) {
      if ((*it)->tag == header.tag) {
        message = std::move(*it);
        peer.posted.erase(it);
        break;
      }
    }
    if (message == nullptr) {
      message = std::make_unique<Incoming>(&unexpected_bytes_);
      message->tag = header.tag;
      message->buffer.resize(header.message_bytes);
      unexpected_bytes_ += header.message_bytes;
      message->buffered = true;
      ++stats_.unexpected_messages;
    }
    message->message_bytes = header.message_bytes;
    message->too_large = !message->buffered && header.message_bytes > message->capacity;
    peer.arrived.push_back(std::move(message));
    peer.current = peer.arrived.back().get();
  }
  Incoming* message = peer.current;
  std::byte* dst = nullptr;
  if (!message->discard && !message->too_large) {
    dst = message->buffered ? reinterpret_cast<std::byte*>(message->buffer.data())
                            : message->dst;
  }
  // offset + bytes <= message_bytes (CheckPiece), and the buffer holds
  // message_bytes (buffered) or the receive has room for them.
  if (dst != nullptr && header.bytes > 0) {
    std::memcpy(dst + header.offset, payload, header.bytes);
  }
  message->arrived += header.bytes;
  if (message->arrived < message->message_bytes) return;
  // Whole.
  message->complete = true;
  peer.current = nullptr;
  ++stats_.messages_received;
  if (!message->waited_on() && !message->discard) {
    return;  // stays unexpected until a receive comes
  }
  auto it = std::find_if(peer.arrived.begin(), peer.arrived.end(),
                         [&](const auto& m) { return m.get() == message; });
  std::unique_ptr<Incoming> owned = std::move(*it);
  peer.arrived.erase(it);
  if (owned->discard) return;
  if (owned->message_bytes > owned->capacity) {
    Fire(owned->done, absl::InvalidArgumentError(absl::StrCat(
        Where(), ": message from rank ", peer.rank, " (tag ", owned->tag, ") has ",
        owned->message_bytes, " bytes, the receive room for ", owned->capacity)));
    return;
  }
  if (owned->buffered && owned->message_bytes > 0) {
    std::memcpy(owned->dst, owned->buffer.data(), owned->message_bytes);
  }
  Fire(owned->done, owned->message_bytes);
}

void Messenger::StartSends(Peer& peer) {
  SlotLink& link = *peer.link;
  while (!peer.outgoing.empty()) {
    // The credit is the peer's: the slot ring checks it.
    absl::StatusOr<bool> room = peer.sender->HasRoom();
    if (!room.ok()) {
      FailPeer(peer, room.status());
      return;
    }
    if (!*room) break;
    Outgoing& message = *peer.outgoing.front();
    const uint64_t seq = peer.sender->Claim();
    const size_t slot = peer.sender->slot(seq);
    std::byte* staging = link.staging(0, slot);
    PieceHeader header{message.tag, message.bytes, message.next_offset,
                       std::min(options_.slot_bytes, message.bytes - message.next_offset)};
    std::memcpy(staging, &header, sizeof(header));
    const rdma::MemoryRegion* region =
        header.bytes > 0 && !message.abandoned ? SendRegionOf(message.data, message.bytes)
                                               : nullptr;
    if (region != nullptr) {
      if (message.zero_copy_end == 0) message.zero_copy_first = seq;
      message.zero_copy_end = seq + 1;
      // The header from staging, the payload from where it lies.
      peer.sender->Write(seq, link.staged(0, slot, 0, kHeaderBytes),
                         link.destination(0, slot, 0, kHeaderBytes));
      peer.sender->Write(
          seq,
          {region, static_cast<size_t>(message.data + header.offset - region->data()),
           header.bytes},
          link.destination(0, slot, kHeaderBytes, header.bytes));
    } else {
      if (header.bytes > 0) {
        std::memcpy(staging + kHeaderBytes, message.Source(header.offset), header.bytes);
        stats_.staged_bytes += header.bytes;
      }
      peer.sender->Write(seq, link.staged(0, slot, 0, kHeaderBytes + header.bytes),
                         link.destination(0, slot, 0, kHeaderBytes + header.bytes));
    }
    peer.sender->Commit(seq);
    ++stats_.pieces_sent;
    stats_.bytes_sent += header.bytes;
    message.next_offset += header.bytes;
    if (message.next_offset == message.bytes) {
      message.last_seq = seq;
      message.all_cut = true;
      peer.cut.push_back(std::move(peer.outgoing.front()));
      peer.outgoing.pop_front();
    }
  }
}

void Messenger::PostActions(Peer& peer) {
  if (!peer.status.ok()) return;
  if (absl::Status posted = peer.sender->Post(); !posted.ok()) {
    if (absl::IsDataLoss(posted)) {
      FailPeer(peer, posted);
    } else {
      PeerDied(peer, posted);
    }
    return;
  }
  // Messages complete when their last piece's flag has landed.
  while (!peer.cut.empty() && peer.cut.front()->last_seq < peer.sender->delivered()) {
    std::unique_ptr<Outgoing> done = std::move(peer.cut.front());
    peer.cut.pop_front();
    ++stats_.messages_sent;
    Fire(done->done, absl::OkStatus());
  }
}

void Messenger::PostCredit(Peer& peer) {
  if (!peer.status.ok()) return;
  if (absl::Status posted = peer.receiver->PostCredit(); !posted.ok()) PeerDied(peer, posted);
}


}  // namespace rdmaflow::onesided
