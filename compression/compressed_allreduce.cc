// File: compressed_allreduce.cc
#include "compression/compressed_allreduce.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/annotate.h"
#include "common/status_macros.h"

namespace rdmaflow::compression {
namespace {

// Payload per messenger piece: a whole top-k message of a few MB goes in a
// few pieces; small ones take one slot.
constexpr size_t kMaxSlotBytes = size_t{1} << 20;

collectives::ReduceOp OpOf(Exchange exchange) {
  return exchange == Exchange::kAllReduceMax ? collectives::ReduceOp::kMax
                                             : collectives::ReduceOp::kSum;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CompressedAllReduce>> CompressedAllReduce::Create(
    onesided::ProgressLoop& loop, rdma::Store& store, const std::string& ns,
    std::vector<int> members, size_t count, const CompressedAllReduceOptions& options) {
  onesided::PeerLinksOptions links;
  if (options.group.ring.timeout > absl::ZeroDuration()) {
    links.timeout = options.group.ring.timeout;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<onesided::PeerLinks> own,
                   onesided::PeerLinks::Create(loop.transport(), store, ns, loop, links));
  ASSIGN_OR_RETURN(std::unique_ptr<CompressedAllReduce> exchange,
                   Create(*own, std::move(members), count, options));
  exchange->own_links_ = std::move(own);
  return exchange;
}

absl::StatusOr<std::unique_ptr<CompressedAllReduce>> CompressedAllReduce::Create(
    onesided::PeerLinks& links, std::vector<int> members, size_t count,
    const CompressedAllReduceOptions& options) {
  onesided::ProgressLoop& loop = links.loop();
  const int rank = loop.transport().rank();
  const auto self = std::find(members.begin(), members.end(), rank);
  if (self == members.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "compressed all-reduce '", options.name, "': rank ", rank, " is not a member"));
  }
  std::unique_ptr<CompressedAllReduce> exchange(new CompressedAllReduce());
  exchange->position_ = static_cast<int>(self - members.begin());
  exchange->loop_ = &loop;
  exchange->timeout_ = options.group.ring.timeout;
  CodecContext context{exchange->position_, static_cast<int>(members.size()), options.seed};
  ASSIGN_OR_RETURN(exchange->codec_, CreateCodec(options.codec, context, count));

  collectives::AllReduceGroupOptions group = options.group;
  group.ring.name = absl::StrCat(options.name, "/rounds");
  group.ring.capacity_bytes = std::max<size_t>(exchange->codec_->scratch_bytes(), 64);
  group.ring.loop = &loop;
  ASSIGN_OR_RETURN(exchange->group_,
                   collectives::AllReduceGroup::Create(links, members, group));
  const size_t message = exchange->codec_->max_message_bytes();
  if (message > 0 && members.size() > 1) {
    onesided::MessengerOptions gather;
    gather.name = absl::StrCat(options.name, "/gather");
    gather.slot_bytes = std::min(kMaxSlotBytes, (message + 63) / 64 * 64);
    gather.slots = 2;  // one message a call to each peer
    gather.timeout = options.group.ring.timeout;
    gather.members = members;
    gather.loop = &loop;
    int world = 0;
    for (int m : members) world = std::max(world, m + 1);
    ASSIGN_OR_RETURN(exchange->messenger_,
                     onesided::Messenger::Create(links, world, gather));
    exchange->messenger_->AddSendRegion(&exchange->group_->data_region());
    exchange->direct_ = std::make_unique<collectives::DirectCollectives>(
        *exchange->messenger_, exchange->timeout_);
    exchange->inbox_.resize(members.size());
    for (size_t m = 0; m < members.size(); ++m) {
      if (static_cast<int>(m) != exchange->position_) exchange->inbox_[m].resize(message);
    }
  }
  exchange->members_ = std::move(members);
  return exchange;
}

CompressedAllReduce::~CompressedAllReduce() {
  if (messenger_ == nullptr || (failure_.ok() && messenger_->idle())) return;
  absl::Status drained = absl::OkStatus();
  if (loop_->OnLoopThread()) {
    drained = messenger_->ProgressUntil(
        [&] { return messenger_->idle(); },
        absl::Now() + std::min(timeout_, absl::Seconds(10)),
        "abandoned messages of a compressed all-reduce");
  } else {
    drained = absl::FailedPreconditionError("destroyed off its progress loop's thread");
  }
  // After a failed call the messenger may have failed a peer with pieces
  // still posted (no longer counted as pending): keep what they read.
  if (drained.ok() && failure_.ok()) return;
  std::fprintf(stderr,
               "compressed all-reduce (%s): %s; keeping its scratch and messenger mapped, "
               "since a message may still be read from them\n",
               codec_->spec().c_str(),
               std::string(!drained.ok() ? drained.message() : failure_.message()).c_str());
  static_cast<void>(direct_.release());
  static_cast<void>(messenger_.release());
  static_cast<void>(group_.release());
  static_cast<void>(own_links_.release());
}

int64_t CompressedAllReduce::WireBytesSoFar() const {
  return group_->stats().bytes_sent + (messenger_ ? messenger_->stats().bytes_sent : 0);
}

absl::Status CompressedAllReduce::AllReduce(absl::Span<float> data, float scale) {
  if (!failure_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "compressed all-reduce (", codec_->spec(), ") is unusable after: ",
        failure_.message()));
  }
  if (data.size() != codec_->count()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "compressed all-reduce (", codec_->spec(), "): ", data.size(),
        " elements; it was made for ", codec_->count()));
  }
  const int64_t wire_before = WireBytesSoFar();
  absl::Status status = Run(data, scale);
  if (!status.ok()) {
    failure_ = status;
    return status;
  }
  ++stats_.calls;
  stats_.wire_bytes += WireBytesSoFar() - wire_before;
  stats_.dense_bytes += static_cast<int64_t>(data.size() * sizeof(float));
  return absl::OkStatus();
}

absl::Status CompressedAllReduce::Run(absl::Span<float> data, float scale) {
  const absl::Span<std::byte> scratch(group_->data(), group_->capacity());
  absl::Time begin = absl::Now();
  ASSIGN_OR_RETURN(Round round, codec_->Begin(data, calls_, scratch));
  stats_.encode_time += absl::Now() - begin;
  for (;;) {
    std::vector<absl::Span<const std::byte>> gathered;
    if (round.exchange == Exchange::kAllGather) {
      RETURN_IF_ERROR(AllGather(round, gathered));
    } else {
      RETURN_IF_ERROR(group_->AllReduce(round.offset,
                                        round.bytes / collectives::ElementSize(round.type),
                                        round.type, OpOf(round.exchange)));
    }
    begin = absl::Now();
    ASSIGN_OR_RETURN(std::optional<Round> next, codec_->Next(scratch, gathered, data, scale));
    const absl::Duration spent = absl::Now() - begin;
    if (!next.has_value()) {
      stats_.decode_time += spent;
      ++calls_;
      return absl::OkStatus();
    }
    stats_.encode_time += spent;
    round = *next;
  }
}

absl::Status CompressedAllReduce::AllGather(const Round& round,
                                            std::vector<absl::Span<const std::byte>>& gathered) {
  gathered.assign(members_.size(), {});
  std::byte* mine = group_->data() + round.offset;
  gathered[position_] = absl::Span<const std::byte>(mine, round.bytes);
  if (direct_ == nullptr) return absl::OkStatus();
  std::vector<void*> outputs(members_.size());
  std::vector<size_t> capacities(members_.size());
  for (size_t m = 0; m < members_.size(); ++m) {
    const bool own = static_cast<int>(m) == position_;
    outputs[m] = own ? static_cast<void*>(mine) : inbox_[m].data();
    capacities[m] = own ? round.bytes : inbox_[m].size();
  }
  absl::StatusOr<std::vector<size_t>> sizes =
      direct_->AllGatherV(mine, round.bytes, outputs, capacities);
  if (!sizes.ok()) {
    return Annotate(sizes.status(),
                    absl::StrCat("the members' messages of compressed all-reduce call ", calls_));
  }
  for (size_t m = 0; m < members_.size(); ++m) {
    gathered[m] = absl::Span<const std::byte>(static_cast<const std::byte*>(outputs[m]),
                                              (*sizes)[m]);
  }
  return absl::OkStatus();
}

absl::Status CompressedAllReduce::Shutdown() { return group_->Shutdown(); }

}  // namespace rdmaflow::compression
