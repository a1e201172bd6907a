// File: rdma_copy_communicator.cc
#include "runtime/rdma_copy_communicator.h"

#include <cstdio>
#include <cstring>
#include <optional>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "runtime/communicator_checks.h"
#include "runtime/internal/chunk_reader.h"
#include "onesided/internal/piece_header.h"
#include "runtime/link_records.h"
#include "runtime/tensor_message.pb.h"

namespace rdmaflow::runtime {
namespace {

constexpr size_t kHeaderRoom = internal::kChunkHeaderRoom;

// A vector-backed tensor (the receiver's copy).
class VectorLease final : public ReceivedTensor::Lease {
 public:
  explicit VectorLease(std::shared_ptr<std::vector<std::byte>> bytes)
      : bytes_(std::move(bytes)) {}

 private:
  std::shared_ptr<std::vector<std::byte>> bytes_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<RdmaCopyCommunicator>>
RdmaCopyCommunicator::Create(const plan::TransferPlan& plan,
                             rdma::Transport& transport, rdma::Store& store,
                             const CommunicatorOptions& options,
                             const RdmaCopyOptions& copy_options) {
  if (copy_options.ring_slots < 1 || copy_options.ring_slots > (1 << 20) ||
      copy_options.chunk_bytes < 64) {
    return absl::InvalidArgumentError(
        "rdma_copy needs ring_slots in 1..2^20 and chunk_bytes >= 64");
  }
  ASSIGN_OR_RETURN(RankPlan rank_plan, RankPlan::Create(plan, transport.rank()));
  RETURN_IF_ERROR(CheckHostMemoryOnly(rank_plan, "the rdma_copy communicator"));
  std::unique_ptr<RdmaCopyCommunicator> communicator(new RdmaCopyCommunicator(
      std::move(rank_plan), transport, store, options, copy_options));
  if (absl::Status status = communicator->SetUp(); !status.ok()) {
    // Half set up: nothing to drain, and no barrier the peers would meet
    // (the caller gets the error; the destructor has nothing to report).
    communicator->shut_down_ = true;
    return status;
  }
  return communicator;
}

RdmaCopyCommunicator::RdmaCopyCommunicator(RankPlan rank_plan,
                                           rdma::Transport& transport,
                                           rdma::Store& store,
                                           const CommunicatorOptions& options,
                                           const RdmaCopyOptions& copy_options)
    : rank_plan_(std::move(rank_plan)),
      transport_(transport),
      options_(options),
      copy_options_(copy_options),
      slot_bytes_(copy_options.chunk_bytes + kHeaderRoom),
      steps_(&rank_plan_, options.lockstep),
      engine_(transport, store, options, rank_plan_.world_size()) {
  engine_.set_handlers({nullptr, [this] { OnRound(); }});
}

RdmaCopyCommunicator::~RdmaCopyCommunicator() {
  absl::Status status = Shutdown();
  if (!status.ok()) {
    std::fprintf(stderr, "rdmaflow: rank %d: rdma_copy shutdown: %s\n",
                 rank_plan_.rank(), status.ToString().c_str());
  }
  // The rings' completions touch their links: let those in flight fire
  // (the peers whose operations hang are severed, which cancels them)
  // before the links go, and the links before the engine's own links.
  // Shut down: OnRound() posts and reads nothing more.
  std::vector<int> busy;
  for (const auto& [peer, link] : peers_) {
    if (link.in_flight() > 0) busy.push_back(peer);
  }
  engine_.Fence(
      busy,
      [&] {
        for (const auto& [peer, link] : peers_) {
          if (link.in_flight() > 0) return false;
        }
        return true;
      },
      absl::Now() + absl::Seconds(2),
      absl::StrCat("the rdma_copy of rank ", rank_plan_.rank(), " is closing"));
  for (auto& [peer, link] : peers_) {
    // A peer that passed no shutdown barrier with us may still write into
    // the link: its memory stays registered (the link says so).
    if (!barrier_passed_) link.link->KeepMemory();
  }
  peers_.clear();  // a link with operations still in flight keeps its memory
}

absl::Status RdmaCopyCommunicator::SetUp() {
  RETURN_IF_ERROR(engine_.Connect(rank_plan_.peers()));
  const int rank = rank_plan_.rank();
  std::set<int> senders, receivers;
  for (const TransferInfo& info : rank_plan_.recvs()) senders.insert(info.src_rank);
  for (const TransferInfo& info : rank_plan_.sends()) receivers.insert(info.dst_rank);
  // One link per peer, a ring of messages each way the plan sends: every
  // link is published before any is waited on. Both ends of a link lay out
  // its rings alike (the shapes and these options), or stop at Connect()
  // quoting both.
  for (int peer : rank_plan_.peers()) {
    onesided::SlotLinkOptions options;
    options.scope = kRdmaCopyScope;
    options.layout = RdmaCopyLayout(copy_options_.ring_slots, slot_bytes_);
    options.peer = peer;
    if (receivers.count(peer) > 0) {
      options.out.push_back({"messages", copy_options_.ring_slots, slot_bytes_,
                             /*stage_sends=*/true});
    }
    if (senders.count(peer) > 0) {
      options.in.push_back({"messages", copy_options_.ring_slots, slot_bytes_});
    }
    if (options.out.empty() && options.in.empty()) continue;
    ASSIGN_OR_RETURN(peers_[peer].link,
                     onesided::SlotLink::Create(engine_.links(), std::move(options)));
  }
  const std::string what = absl::StrCat("rdma_copy of rank ", rank);
  for (auto& [peer, link] : peers_) {
    RETURN_IF_ERROR(link.link->Connect(what));
    if (link.link->out_index("messages") == 0) link.sender = &link.link->sender(0);
    if (link.link->in_index("messages") == 0) link.receiver = &link.link->receiver(0);
  }
  return absl::OkStatus();
}

absl::Status RdmaCopyCommunicator::CheckUsable() const {
  RETURN_IF_ERROR(CheckNotShutDown(shut_down_, rank_plan_.rank()));
  return engine_.failure();
}

absl::Status RdmaCopyCommunicator::Send(int id, OutgoingTensor tensor) {
  RETURN_IF_ERROR(CheckUsable());
  ASSIGN_OR_RETURN(SendArguments args, CheckSendArguments(rank_plan_, id, tensor,
                                                          options_.dynamic_pool_bytes));
  const TransferInfo* info = args.info;
  const uint64_t bytes = args.bytes;
  RETURN_IF_ERROR(steps_.CheckSend(*info));
  onesided::SlotLink& link = *peers_.at(info->dst_rank).link;
  onesided::SlotRingSender& sender = *peers_.at(info->dst_rank).sender;
  const uint64_t slots = static_cast<uint64_t>(copy_options_.ring_slots);
  TensorChunk header;
  header.set_id(id);
  header.set_step(steps_.SendSequence(*info));
  for (int64_t d : tensor.shape) header.add_shape(d);
  header.set_total_bytes(bytes);
  uint64_t offset = 0;
  do {
    const uint64_t chunk = std::min<uint64_t>(bytes - offset, copy_options_.chunk_bytes);
    header.set_offset(offset);
    header.set_chunk_bytes(chunk);
    const size_t header_bytes = header.ByteSizeLong();
    if (4 + header_bytes > kHeaderRoom) {
      // Nothing claimed yet: the slot would overflow into its neighbour.
      return absl::InvalidArgumentError(absl::StrCat(
          "rdma_copy of rank ", rank_plan_.rank(), ": the header of ", info->Describe(),
          " takes ", header_bytes, " bytes, more than the ", kHeaderRoom - 4,
          " a message slot has room for (a shape of ", tensor.shape.size(), " dimensions)"));
    }
    RETURN_IF_ERROR(engine_.WaitUntil(
        [&] {
          // The credit is the receiver's: the ring checks it before it
          // frees a slot. The slot's staging is ours again once the write
          // of its last message has completed (an honest receiver credits
          // only what it read, which was flushed first; a lying one does
          // not get us to overwrite a write in flight).
          absl::StatusOr<bool> room = sender.HasRoom();
          if (!room.ok()) {
            engine_.Fail(room.status());
            return false;  // the next poll returns the failure
          }
          return *room && sender.written() + slots > sender.claimed();
        },
        info->dst_rank, [&] {
          return absl::StrCat("rank ", info->dst_rank,
                              " does not drain its message ring (sending ",
                              info->Describe(), ")");
        }));
    const uint64_t seq = sender.Claim();
    const size_t slot = sender.slot(seq);
    // Serialize: the header's length and the header, then the payload
    // copied in behind it.
    std::byte* base = link.staging(0, slot);
    const uint32_t length_word = static_cast<uint32_t>(header_bytes);
    std::memcpy(base, &length_word, 4);
    header.SerializeToArray(base + 4, static_cast<int>(header_bytes));
    const size_t payload = 4 + header_bytes;
    if (chunk > 0) std::memcpy(base + payload, tensor.data + offset, chunk);
    const size_t length = payload + chunk;
    sender.Write(seq, link.staged(0, slot, 0, length), link.destination(0, slot, 0, length));
    sender.Commit(seq);
    if (absl::Status posted = sender.Post(); !posted.ok()) {
      engine_.Fail(posted);
      return absl::Status(posted.code(), absl::StrCat("sending ", info->Describe(), ": ",
                                                      posted.message()));
    }
    offset += chunk;
  } while (offset < bytes);
  // A flag goes out once its flush has completed, from a progress round:
  // wait for that here, so the message is on its way when Send() returns
  // and the receiver never waits on a sender busy elsewhere. Where flags
  // follow their writes at once (slot_ring.h), the message is on its way
  // once nothing of it is left queued.
  RETURN_IF_ERROR(engine_.WaitUntil(
      [&] {
        return sender.flags_follow_writes() ? !sender.has_queued()
                                            : sender.written() == sender.claimed();
      },
      info->dst_rank,
      [&] { return absl::StrCat("the writes of ", info->Describe(), " to go out"); }));
  if (absl::Status posted = sender.Post(); !posted.ok()) {
    engine_.Fail(posted);
    return absl::Status(posted.code(),
                        absl::StrCat("sending ", info->Describe(), ": ", posted.message()));
  }
  steps_.Sent(*info);
  ++counters_.tensors_sent;
  counters_.bytes_sent += bytes;
  ++counters_.copies;
  counters_.bytes_copied += bytes;
  return absl::OkStatus();
}

void RdmaCopyCommunicator::OnRound() {
  // Failed or shut down: nothing more is read or written.
  if (!engine_.failure().ok() || shut_down_) return;
  for (auto& [peer, link] : peers_) {
    if (link.sender != nullptr) {
      // Completed flushes queued their flags; a full queue left writes.
      if (absl::Status posted = link.sender->Post(); !posted.ok()) {
        engine_.Fail(posted);
        return;
      }
    }
    if (link.receiver != nullptr) {
      Receive(peer, link);
      if (closing_ || !engine_.failure().ok()) continue;
      if (absl::Status posted = link.receiver->PostCredit(); !posted.ok()) {
        engine_.Fail(posted);
        return;
      }
    }
  }
}

void RdmaCopyCommunicator::Receive(int peer, Peer& link) {
  while (engine_.failure().ok()) {
    // The flag is the sender's: the ring checks it (kDataLoss, for good).
    absl::StatusOr<bool> arrived = link.receiver->Arrived();
    if (!arrived.ok()) {
      engine_.Fail(arrived.status());
      return;
    }
    if (!*arrived) return;
    absl::Status delivered = Deliver(peer, link.link->received(0, link.receiver->slot()));
    if (!delivered.ok()) {
      engine_.Fail(std::move(delivered));
      return;
    }
    link.receiver->Consume();
  }
}

bool RdmaCopyCommunicator::Idle() const {
  for (const auto& [peer, link] : peers_) {
    if (link.sender != nullptr && !link.sender->idle()) return false;
    if (link.receiver != nullptr && link.receiver->credit_pending()) return false;
  }
  return true;
}

namespace internal {

absl::StatusOr<ChunkInSlot> ReadChunk(int peer, const std::byte* slot) {
  // Copied once, then parsed: a protobuf parser reading the ring in place
  // would meet bytes the sender changes under it (a length prefix, a varint).
  uint32_t header_bytes = 0;
  std::memcpy(&header_bytes, slot, 4);
  if (header_bytes > kChunkHeaderRoom - 4) {
    return absl::DataLossError(absl::StrCat("undecodable message header from rank ", peer,
                                            " (length ", header_bytes, ", room for ",
                                            kChunkHeaderRoom - 4, ")"));
  }
  std::byte copy[kChunkHeaderRoom - 4];
  std::memcpy(copy, slot + 4, header_bytes);
  ChunkInSlot chunk;
  if (!chunk.header.ParseFromArray(copy, static_cast<int>(header_bytes))) {
    return absl::DataLossError(absl::StrCat("undecodable message header from rank ", peer));
  }
  chunk.payload_offset = 4 + header_bytes;
  return chunk;
}

}  // namespace internal

absl::Status RdmaCopyCommunicator::Deliver(int peer, const std::byte* message) {
  ASSIGN_OR_RETURN(internal::ChunkInSlot chunk, internal::ReadChunk(peer, message));
  const TensorChunk& header = chunk.header;
  ASSIGN_OR_RETURN(const TransferInfo* info, rank_plan_.FindRecv(header.id()));
  if (info->src_rank != peer) {
    return absl::DataLossError(absl::StrCat(
        "rank ", peer, " sent a chunk of ", info->Describe(), ", which it does not send"));
  }
  // The chunk continues the tensor under way on this id, or starts one, cut
  // as Send() cuts (the same rule as the Messenger's pieces): so offset +
  // chunk_bytes never passes the buffer allocated at the start.
  auto under_way = partial_.find(header.id());
  std::optional<onesided::internal::PartialMessage> current;
  if (under_way != partial_.end()) {
    current = onesided::internal::PartialMessage{static_cast<uint64_t>(header.id()),
                                       under_way->second.bytes->size(),
                                       under_way->second.arrived};
  }
  if (absl::Status valid = onesided::internal::CheckPiece(
          {static_cast<uint64_t>(header.id()), header.total_bytes(), header.offset(),
           header.chunk_bytes()},
          current.has_value() ? &*current : nullptr, copy_options_.chunk_bytes);
      !valid.ok()) {
    return absl::DataLossError(absl::StrCat("a malformed chunk of ", info->Describe(),
                                            " came from rank ", peer, ": ",
                                            valid.message()));
  }
  if (header.offset() == 0) {
    std::vector<int64_t> shape(header.shape().begin(), header.shape().end());
    ASSIGN_OR_RETURN(uint64_t bytes,
                     CheckArrivedTensor(*info, peer, shape, header.total_bytes(),
                                        options_.dynamic_pool_bytes));
    under_way = partial_
                    .insert_or_assign(header.id(),
                                      Assembled{header.step(), std::move(shape),
                                                std::make_shared<std::vector<std::byte>>(
                                                    bytes)})
                    .first;
  }
  Assembled& partial = under_way->second;
  // Deserialize: copy the payload out of the ring into the tensor.
  if (header.chunk_bytes() > 0) {
    std::memcpy(partial.bytes->data() + header.offset(),
                message + chunk.payload_offset, header.chunk_bytes());
  }
  partial.arrived += header.chunk_bytes();
  if (partial.arrived == partial.bytes->size()) {
    ++counters_.copies;
    counters_.bytes_copied += header.total_bytes();
    ready_[header.id()].push_back(std::move(partial));
    partial_.erase(header.id());
  }
  return absl::OkStatus();
}

absl::StatusOr<ReceivedTensor> RdmaCopyCommunicator::Recv(int id) {
  RETURN_IF_ERROR(CheckUsable());
  ASSIGN_OR_RETURN(const TransferInfo* info, rank_plan_.FindRecv(id));
  RETURN_IF_ERROR(steps_.CheckRecv(*info));
  std::deque<Assembled>& queue = ready_[id];
  const absl::Time begin = absl::Now();
  if (queue.empty()) {
    RETURN_IF_ERROR(engine_.WaitUntil(
        [&] { return !queue.empty(); }, info->src_rank, [&] {
          return absl::StrCat("rank ", info->src_rank,
                              " has not delivered step ", steps_.step(), " of ",
                              info->Describe());
        }));
    counters_.recv_wait += absl::Now() - begin;
  }
  Assembled tensor = std::move(queue.front());
  queue.pop_front();
  if (tensor.step != steps_.RecvSequence(*info)) {
    return absl::DataLossError(absl::StrCat(
        info->Describe(), ": tensor ", tensor.step, " arrived as tensor ",
        steps_.RecvSequence(*info), " (step ", steps_.step(), ")"));
  }
  steps_.Received(*info);
  ++counters_.tensors_received;
  counters_.bytes_received += tensor.bytes->size();
  std::byte* data = tensor.bytes->data();
  const size_t size = tensor.bytes->size();
  return ReceivedTensor(data, size, std::move(tensor.shape),
                        std::make_unique<VectorLease>(std::move(tensor.bytes)));
}

absl::StatusOr<bool> RdmaCopyCommunicator::Ready(int id) {
  RETURN_IF_ERROR(CheckUsable());
  ASSIGN_OR_RETURN(const TransferInfo* info, rank_plan_.FindRecv(id));
  RETURN_IF_ERROR(steps_.CheckRecv(*info));
  RETURN_IF_ERROR(engine_.Poll());
  return !ready_[id].empty();
}

absl::Status RdmaCopyCommunicator::FinishStep() {
  RETURN_IF_ERROR(CheckUsable());
  RETURN_IF_ERROR(steps_.FinishStep());
  ++counters_.steps;
  return engine_.Poll();
}

absl::Status RdmaCopyCommunicator::Shutdown() {
  if (shut_down_) return shutdown_status_;
  absl::Status status = engine_.failure();
  if (status.ok()) {
    status = engine_.Drain([&] { return Idle(); },
                           [] { return std::string("messages or credits still in flight"); });
  }
  // Drained: our messages have landed and our credits with them.
  closing_ = true;
  if (status.ok()) status = engine_.Barrier("shutdown");
  barrier_passed_ = status.ok();
  shut_down_ = true;
  shutdown_status_ = status;
  return status;
}

}  // namespace rdmaflow::runtime
