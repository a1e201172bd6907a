// File: rdma_copy_communicator.cc
#include "runtime/rdma_copy_communicator.h"

#include <cstdio>
#include <cstring>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "onesided/slots/credit_check.h"
#include "runtime/communicator_checks.h"
#include "runtime/internal/chunk_reader.h"
#include "onesided/internal/piece_header.h"
#include "onesided/links/peer_links.h"
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
  engine_.set_handlers(
      {[this](const rdma::Notification& n) { OnNotification(n); },
       [this] { PostCredits(); }});
}

RdmaCopyCommunicator::~RdmaCopyCommunicator() {
  absl::Status status = Shutdown();
  if (!status.ok()) {
    std::fprintf(stderr, "rdmaflow: rank %d: rdma_copy shutdown: %s\n",
                 rank_plan_.rank(), status.ToString().c_str());
  }
}

absl::Status RdmaCopyCommunicator::SetUp() {
  RETURN_IF_ERROR(engine_.Connect(rank_plan_.peers()));
  const int rank = rank_plan_.rank();
  const size_t ring_bytes = slot_bytes_ * copy_options_.ring_slots;
  // Both ends of a link lay out its ring alike, or stop here quoting both.
  const std::string layout = RdmaCopyLayout(copy_options_.ring_slots, slot_bytes_);
  const std::string what = absl::StrCat("rdma_copy of rank ", rank);
  std::set<int> senders, receivers;
  for (const TransferInfo& info : rank_plan_.recvs()) senders.insert(info.src_rank);
  for (const TransferInfo& info : rank_plan_.sends()) receivers.insert(info.dst_rank);
  ASSIGN_OR_RETURN(rdma::MemoryRegion credit_out,
                   transport_.Allocate(8 * std::max<size_t>(1, senders.size())));
  credit_out_ = std::make_unique<rdma::MemoryRegion>(std::move(credit_out));
  size_t word = 0;
  for (int src : senders) {
    Incoming& in = incoming_[src];
    in.endpoint = engine_.endpoint(src);
    in.credit_word = 8 * word++;
    ASSIGN_OR_RETURN(rdma::MemoryRegion ring, transport_.Allocate(ring_bytes));
    in.ring = std::make_unique<rdma::MemoryRegion>(std::move(ring));
    RETURN_IF_ERROR(engine_.links().Publish(
        {RdmaCopyScope(src, rank), layout, {{"ring", in.ring.get()}}}));
  }
  for (int dst : receivers) {
    Outgoing& out = outgoing_[dst];
    out.endpoint = engine_.endpoint(dst);
    ASSIGN_OR_RETURN(rdma::MemoryRegion bounce, transport_.Allocate(ring_bytes));
    out.bounce = std::make_unique<rdma::MemoryRegion>(std::move(bounce));
    out.bounce_busy.assign(copy_options_.ring_slots, false);
    ASSIGN_OR_RETURN(rdma::MemoryRegion credit, transport_.Allocate(8));
    out.credit = std::make_unique<rdma::MemoryRegion>(std::move(credit));
    RETURN_IF_ERROR(engine_.links().Publish(
        {RdmaCopyScope(rank, dst), layout, {{"credit", out.credit.get()}}}));
  }
  // Each fetched region is prepared at once, while its peer is known to
  // hold it, not at the first post (Endpoint::Prepare).
  for (auto& [dst, out] : outgoing_) {
    ASSIGN_OR_RETURN(onesided::PeerRegions ring,
                     engine_.links().Fetch({RdmaCopyScope(rank, dst), layout, {{"ring", nullptr}}},
                                           dst, what));
    RETURN_IF_ERROR(onesided::CheckRegionBytes(ring.regions[0], ring_bytes, "its message ring", what));
    out.ring = std::move(ring.regions[0]);
    RETURN_IF_ERROR(out.endpoint->Prepare(out.ring));
  }
  for (auto& [src, in] : incoming_) {
    ASSIGN_OR_RETURN(onesided::PeerRegions credit,
                     engine_.links().Fetch({RdmaCopyScope(src, rank), layout,
                                            {{"credit", nullptr}}},
                                           src, what));
    RETURN_IF_ERROR(onesided::CheckRegionBytes(credit.regions[0], 8, "its credit word", what));
    in.credit = std::move(credit.regions[0]);
    RETURN_IF_ERROR(in.endpoint->Prepare(in.credit));
    onesided::CreditWriter::Options credits;
    credits.peer = absl::StrCat("rank ", src);
    credits.endpoint = in.endpoint;
    credits.source = credit_out_.get();
    credits.source_offset = in.credit_word;
    credits.remote = &in.credit;
    credits.started = [this, src] { engine_.Started(src); };
    credits.completed = [this, src] { engine_.Completed(src); };
    in.credits = std::make_unique<onesided::CreditWriter>(std::move(credits));
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
  Outgoing& out = outgoing_.at(info->dst_rank);
  const int slots = copy_options_.ring_slots;
  TensorChunk header;
  header.set_id(id);
  header.set_step(steps_.SendSequence(*info));
  for (int64_t d : tensor.shape) header.add_shape(d);
  header.set_total_bytes(bytes);
  uint64_t offset = 0;
  do {
    const uint64_t chunk = std::min<uint64_t>(bytes - offset, copy_options_.chunk_bytes);
    const uint64_t message = out.next_message;
    const int slot = static_cast<int>(message % slots);
    RETURN_IF_ERROR(engine_.WaitUntil(
        [&] {
          // The consumed count is the receiver's: checked before it frees a slot.
          const uint64_t consumed = onesided::LoadCredit(out.credit->data());
          if (absl::Status valid =
                  onesided::CheckCredit(absl::StrCat("rank ", info->dst_rank), "messages",
                                        consumed, out.credit_seen, out.next_message);
              !valid.ok()) {
            engine_.Fail(std::move(valid));
            return false;  // the next poll returns the failure
          }
          out.credit_seen = consumed;
          return consumed + slots > message && !out.bounce_busy[slot];
        },
        info->dst_rank, [&] {
          return absl::StrCat("rank ", info->dst_rank,
                              " does not drain its message ring (sending ",
                              info->Describe(), ")");
        }));
    // Serialize: header, then the payload copied in behind it.
    header.set_offset(offset);
    header.set_chunk_bytes(chunk);
    std::byte* base = out.bounce->data() + slot * slot_bytes_;
    const uint32_t header_bytes = static_cast<uint32_t>(header.ByteSizeLong());
    std::memcpy(base, &header_bytes, 4);
    header.SerializeToArray(base + 4, static_cast<int>(header_bytes));
    const size_t payload = 4 + header_bytes;
    if (chunk > 0) std::memcpy(base + payload, tensor.data + offset, chunk);
    out.bounce_busy[slot] = true;
    const size_t length = payload + chunk;
    RETURN_IF_ERROR(engine_.Post(
        [&] {
          return out.endpoint->PostWrite(
              {out.bounce.get(), slot * slot_bytes_, length},
              {&out.ring, slot * slot_bytes_, length},
              static_cast<uint32_t>(slot),
              [this, busy = &out.bounce_busy, slot, info](absl::Status status) {
                engine_.Completed(info->dst_rank);
                (*busy)[slot] = false;
                if (!status.ok()) {
                  engine_.Fail(absl::Status(
                      status.code(), absl::StrCat("sending ", info->Describe(),
                                                  ": ", status.message())));
                }
              });
        },
        info->dst_rank, [&] { return absl::StrCat("posting ", info->Describe()); }));
    ++out.next_message;
    offset += chunk;
  } while (offset < bytes);
  steps_.Sent(*info);
  ++counters_.tensors_sent;
  counters_.bytes_sent += bytes;
  ++counters_.copies;
  counters_.bytes_copied += bytes;
  return absl::OkStatus();
}

void RdmaCopyCommunicator::OnNotification(const rdma::Notification& n) {
  auto it = incoming_.find(n.peer_rank);
  if (it == incoming_.end() ||
      n.value >= static_cast<uint32_t>(copy_options_.ring_slots)) {
    engine_.Fail(absl::InternalError(absl::StrCat(
        "rank ", rank_plan_.rank(), " got a message notification from rank ",
        n.peer_rank, " it expects nothing from")));
    return;
  }
  Incoming& in = it->second;
  const int slot = static_cast<int>(in.consumed % copy_options_.ring_slots);
  if (n.value != static_cast<uint32_t>(slot)) {
    engine_.Fail(absl::InternalError(absl::StrCat(
        "message ring from rank ", n.peer_rank, " out of order: slot ",
        n.value, " where ", slot, " was due")));
    return;
  }
  absl::Status delivered =
      Deliver(n.peer_rank, in.ring->data() + slot * slot_bytes_);
  if (!delivered.ok()) engine_.Fail(delivered);
  ++in.consumed;
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

void RdmaCopyCommunicator::PostCredits() {
  for (auto& [src, in] : incoming_) {
    in.credits->Set(0, in.consumed);
    if (absl::Status posted = in.credits->Post(); !posted.ok()) engine_.Fail(posted);
  }
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
    status = engine_.Drain(
        [&] {
          for (const auto& [src, in] : incoming_) {
            if (in.credits->pending()) return false;
          }
          return true;
        },
        [] { return std::string("message credits still to return"); });
  }
  if (status.ok()) status = engine_.Barrier("shutdown");
  shut_down_ = true;
  shutdown_status_ = status;
  return status;
}

}  // namespace rdmaflow::runtime
