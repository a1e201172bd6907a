// File: staging.cc
#include "rdma/device/staging.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/shared_word.h"
#include "common/status_macros.h"
#include "rdma/device/device_key.h"

namespace rdmaflow::rdma::device_path {

namespace layout = staging_layout;

namespace {

// words_: the credit word we write from, our directory entry, then one
// header per slot.
constexpr size_t kCreditSource = 0;
constexpr size_t kEntrySource = 64;
constexpr size_t kHeaderSources = kEntrySource + layout::kEntryBytes;
// How long a staged write waits for the peer to connect back (its link),
// and how often a sender waiting for credits checks that the peer lives
// (a flush, which fails once the host transport declares it gone).
constexpr absl::Duration kConnectBackTimeout = absl::Seconds(60);
constexpr absl::Duration kProbeInterval = absl::Milliseconds(100);

uint64_t Load(const std::byte* word) { return LoadSharedWord(word); }

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

absl::Status CheckStagingOptions(const StagingOptions& o) {
  if (o.slots < 2 || o.slots > 1024 || o.slot_bytes < 4096 || o.slot_bytes > (64u << 20) ||
      o.slot_bytes % 64 != 0 || o.directory_ranks < 1 || o.directory_ranks > 65536) {
    return absl::InvalidArgumentError(absl::StrCat(
        "staging options: ", o.slots, " slots of ", o.slot_bytes, " bytes, a directory of ",
        o.directory_ranks, " ranks (needs 2..1024 slots of 4 KiB..64 MiB, a multiple of 64, "
        "and 1..65536 ranks)"));
  }
  return absl::OkStatus();
}

uint64_t HeaderCheck(uint64_t sequence, uint64_t address, uint64_t length, uint64_t request) {
  return Mix(Mix(Mix(Mix(sequence ^ 0x7264666c6f770a01ULL) ^ address) ^ length) ^ request);
}

void EncodeHeader(const ChunkHeader& header, std::byte* out) {
  const uint64_t words[5] = {header.sequence, header.address, header.length, header.request,
                             header.check};
  std::memcpy(out, words, sizeof(words));
}

namespace {

uint64_t RequestCheck(const ReadRequest& r) {
  return Mix(Mix(Mix(Mix(r.sequence ^ 0x7264666c6f770a02ULL) ^ r.source) ^ r.length) ^
             r.destination);
}

// The largest read one request may ask for.
constexpr uint64_t kMaxReadBytes = uint64_t{1} << 40;

}  // namespace

void EncodeRequest(const ReadRequest& request, std::byte* out) {
  const uint64_t words[5] = {request.sequence, request.source, request.length,
                             request.destination, RequestCheck(request)};
  std::memcpy(out, words, sizeof(words));
}

absl::StatusOr<std::optional<ReadRequest>> ReadRequestAt(const std::byte* slot, uint64_t expected,
                                                         size_t slots, int peer) {
  uint64_t words[5];
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  std::memcpy(words, slot, sizeof(words));
  ReadRequest request{words[0], words[1], words[2], words[3], words[4]};
  const uint64_t older = expected > slots ? expected - slots : 0;
  if (request.sequence == older || request.check != RequestCheck(request)) return std::nullopt;
  if (request.sequence != expected) {
    return absl::DataLossError(absl::StrCat("rank ", peer, " wrote read request ",
                                            request.sequence, " into the slot of request ",
                                            expected, ": a forged or corrupted request"));
  }
  const bool void_request = request.source == 0 && request.destination == 0;
  if ((request.length == 0 && !void_request) || request.length > kMaxReadBytes) {
    return absl::DataLossError(absl::StrCat("rank ", peer, "'s read request ", expected,
                                            " asks for ", request.length,
                                            " bytes (1 to 2^40)"));
  }
  return request;
}

absl::StatusOr<std::optional<ChunkHeader>> ReadHeader(const std::byte* slot_header,
                                                      uint64_t expected, size_t slots,
                                                      size_t slot_bytes, int peer) {
  // One copy; only the copy is looked at.
  uint64_t words[5];
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  std::memcpy(words, slot_header, sizeof(words));
  ChunkHeader header{words[0], words[1], words[2], words[3], words[4]};
  const uint64_t older = expected > slots ? expected - slots : 0;
  if (header.sequence == older) return std::nullopt;  // the slot's last chunk
  if (header.check !=
      HeaderCheck(header.sequence, header.address, header.length, header.request)) {
    // Half written (the sender writes it at once, behind the data), or
    // forged: either way not a chunk yet. A forger only stalls its own link.
    return std::nullopt;
  }
  if (header.sequence != expected) {
    return absl::DataLossError(absl::StrCat(
        "rank ", peer, " wrote chunk ", header.sequence, " into the staging slot of chunk ",
        expected, ": a forged or corrupted header"));
  }
  // Nothing carried: a void chunk (request 0) or the empty answer to a
  // void read request (its request named), neither with an address.
  const bool empty = header.address == 0;
  if ((header.length == 0 && !empty) || header.length > slot_bytes) {
    return absl::DataLossError(absl::StrCat("rank ", peer, "'s staged chunk ", expected,
                                            " claims ", header.length,
                                            " bytes in a slot of ", slot_bytes));
  }
  return header;
}

uint64_t Incarnation(const std::string& host_address) {
  return Fnv1a(host_address.data(), host_address.size());
}

std::string SealEntry(const std::string& body, uint64_t incarnation) {
  const uint64_t words[2] = {body.size(), Fnv1a(body.data(), body.size()) ^ incarnation};
  return std::string(reinterpret_cast<const char*>(words), sizeof(words)) + body;
}

std::string EncodeEntry(const RemoteRegion& link, uint64_t incarnation) {
  return SealEntry(link.Serialize(), incarnation);
}

absl::StatusOr<std::optional<RemoteRegion>> ReadEntry(const std::byte* entry, int peer,
                                                      uint64_t incarnation,
                                                      const std::string& backend,
                                                      size_t link_bytes) {
  const uint64_t length = Load(entry);
  if (length == 0) return std::nullopt;
  constexpr size_t kMaxBody = layout::kEntryBytes - layout::kEntryHeaderBytes;
  if (length > kMaxBody) {
    return absl::DataLossError(absl::StrCat("rank ", peer, "'s staging entry claims ", length,
                                            " bytes (at most ", kMaxBody, ")"));
  }
  // One copy of the check word and the body; only the copy is used. A body
  // that fails its check is being rewritten (or forged), or an earlier
  // incarnation of the peer left it: not there yet.
  uint64_t check = 0;
  std::memcpy(&check, entry + sizeof(uint64_t), sizeof(check));
  const std::string body(reinterpret_cast<const char*>(entry + layout::kEntryHeaderBytes),
                         length);
  if (check != (Fnv1a(body.data(), body.size()) ^ incarnation)) return std::nullopt;
  absl::StatusOr<RemoteRegion> link = RemoteRegion::Parse(body);
  if (!link.ok()) {
    return absl::DataLossError(absl::StrCat("rank ", peer, "'s staging entry does not parse: ",
                                            link.status().message()));
  }
  if (link->owner_rank != peer || link->backend != backend ||
      link->memory_kind != device::MemoryKind::kHost || link->length < link_bytes) {
    return absl::DataLossError(absl::StrCat(
        "rank ", peer, "'s staging entry names ", link->DebugString(), ", not a ", backend,
        " host region of rank ", peer, " of at least ", link_bytes, " bytes"));
  }
  return *std::move(link);
}

void DeviceRanges::Add(uintptr_t base, size_t size) {
  absl::MutexLock lock(&mu_);
  ranges_.emplace_back(base, size);
}

void DeviceRanges::Remove(uintptr_t base, size_t size) {
  absl::MutexLock lock(&mu_);
  auto it = std::find(ranges_.begin(), ranges_.end(), std::make_pair(base, size));
  if (it != ranges_.end()) ranges_.erase(it);
}

bool DeviceRanges::Contains(uint64_t address, uint64_t length) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [base, size] : ranges_) {
    if (address >= base && address - base <= size && length <= size - (address - base)) {
      return true;
    }
  }
  return false;
}

// A host post under way: its completion sets these.
struct StagingLink::Step {
  bool done = false;
  absl::Status status;
};

struct StagingLink::Chunk {
  enum class Phase { kQueued, kCopying, kCopied, kWriting, kFlushing, kHeader, kSent };
  Phase phase = Phase::kQueued;
  uint64_t sequence = 0;
  // The source: a host region of the host transport, or device memory.
  const MemoryRegion* region = nullptr;
  size_t offset = 0;
  const std::byte* device_source = nullptr;
  uint64_t address = 0;
  uint64_t length = 0;
  uint64_t request = 0;  // the read it answers; 0: a write
  // A cancelled write's chunk not yet under way: it goes void.
  bool cancelled = false;
  device::QueuedWork copy;  // kCopying: out of its device source
  std::shared_ptr<Step> step;
};

struct StagingLink::Incoming {
  uint64_t sequence = 0;
  uint64_t request = 0;
  uint64_t length = 0;
  // Its copy; none where nothing lands (a void chunk, an answer to a
  // cancelled read).
  device::QueuedWork copy;
};

struct StagingLink::Read {
  uint64_t sequence = 0;
  uint64_t source = 0;
  uint64_t length = 0;
  std::byte* destination = nullptr;
  // Its request posted: the peer may answer from then on, even before the
  // post's completion fires here (sent).
  bool posted = false;
  bool sent = false;
  std::shared_ptr<Step> step;
  uint64_t accepted = 0;  // bytes of its answer whose copies are queued
  uint64_t landed = 0;    // ... and done
  // Cancelled: the rest of its answer lands nowhere.
  bool cancelled = false;
  // Sent void (cancelled before its request went): its length is 0, and
  // it is done once the peer's empty answer came (the peer took it, so its
  // request slot may be written again).
  bool voided = false;
  bool answered = false;
};

namespace {

Completion Into(const std::shared_ptr<void>& keep, bool* done, absl::Status* status) {
  return [keep, done, status](absl::Status s) {
    *status = std::move(s);
    *done = true;
  };
}

}  // namespace

absl::StatusOr<std::unique_ptr<StagingLink>> StagingLink::Create(
    Transport& host, device::DeviceRuntime& runtime, const StagingOptions& options,
    std::unique_ptr<Endpoint> endpoint, const RemoteRegion& peer_directory, int our_rank,
    const std::byte* our_entry, uint64_t peer_incarnation, std::shared_ptr<DeviceRanges> ranges) {
  RETURN_IF_ERROR(CheckStagingOptions(options));
  if (endpoint == nullptr) return absl::InvalidArgumentError("a staging link needs an endpoint");
  const int peer_rank = endpoint->peer_rank();
  if (our_rank < 0 || peer_directory.length / layout::kEntryBytes <= static_cast<uint64_t>(our_rank)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", peer_rank, "'s staging directory has ",
        peer_directory.length / layout::kEntryBytes, " entries, none for rank ", our_rank,
        ": give every rank's device transport a directory of at least the job's size "
        "(DeviceTransportOptions::staging.directory_ranks)"));
  }
  std::unique_ptr<StagingLink> link(new StagingLink());
  link->options_ = options;
  link->endpoint_ = std::move(endpoint);
  link->peer_ = peer_rank;
  link->backend_ = host.capabilities().backend;
  link->runtime_ = &runtime;
  link->events_.emplace(runtime);
  link->ranges_ = std::move(ranges);
  link->our_entry_ = our_entry;
  link->peer_incarnation_ = peer_incarnation;
  link->peer_directory_ = peer_directory;
  ASSIGN_OR_RETURN(link->link_, host.Allocate(layout::LinkBytes(options)));
  ASSIGN_OR_RETURN(link->outbound_, host.Allocate(options.slots * options.slot_bytes));
  ASSIGN_OR_RETURN(link->words_,
                   host.Allocate(kHeaderSources + 2 * options.slots * layout::kHeaderBytes));
  // Pinned: the device copies out of and into them run at the bus's speed.
  RETURN_IF_ERROR(runtime.PinHost(link->link_.data(), link->link_.size()));
  absl::Status pinned = runtime.PinHost(link->outbound_.data(), link->outbound_.size());
  if (!pinned.ok()) {
    runtime.UnpinHost(link->link_.data()).IgnoreError();
    return pinned;
  }
  const std::string entry =
      EncodeEntry(link->link_.descriptor(), Incarnation(host.address()));
  if (entry.size() > layout::kEntryBytes) {
    return absl::InternalError(absl::StrCat("a staging entry of ", entry.size(), " bytes"));
  }
  std::memcpy(link->words_.data() + kEntrySource, entry.data(), entry.size());
  link->our_rank_ = our_rank;
  return link;
}

StagingLink::~StagingLink() {
  // Its posts end before the memory they name goes. The transport drained
  // the device's copies first.
  if (endpoint_ != nullptr) endpoint_->Close().IgnoreError();
  endpoint_.reset();
  if (link_.data() != nullptr) runtime_->UnpinHost(link_.data()).IgnoreError();
  if (outbound_.data() != nullptr) runtime_->UnpinHost(outbound_.data()).IgnoreError();
}

absl::Status StagingLink::QueueCopy(device::Stream& stream, void* to, const void* from,
                                    uint64_t length, device::QueuedWork& copy) {
  ASSIGN_OR_RETURN(std::unique_ptr<device::Event> event, TakeEvent());
  absl::Status queued = stream.Copy(to, from, length);
  if (!queued.ok()) {
    ReturnEvent(std::move(event));
    return queued;
  }
  // Queued: it touches its memory until it ended, whatever the Record
  // says. A Record the device refused costs only time: the copy is
  // watched through the stream until one passes, and a broken stream
  // fails the link there.
  copy.Mark(stream, std::move(event)).IgnoreError();
  return absl::OkStatus();
}

void StagingLink::ReturnEvent(std::unique_ptr<device::Event> event) {
  events_->Give(std::move(event));
}

absl::StatusOr<std::unique_ptr<device::Event>> StagingLink::TakeEvent() { return events_->Take(); }

uint64_t StagingLink::Stage(const LocalSlice& src, uint64_t address, uint64_t length) {
  const bool on_device = src.region->descriptor().memory_kind == device::MemoryKind::kDevice;
  return on_device ? StageChunks(nullptr, 0, src.data(), address, length, 0)
                   : StageChunks(src.region, src.offset, nullptr, address, length, 0);
}

uint64_t StagingLink::StageChunks(const MemoryRegion* region, size_t offset,
                                  const std::byte* device_source, uint64_t address,
                                  uint64_t length, uint64_t request) {
  for (uint64_t done = 0; done < length;) {
    const uint64_t n = std::min<uint64_t>(options_.slot_bytes, length - done);
    Chunk chunk;
    chunk.sequence = ++staged_;
    if (device_source != nullptr) {
      chunk.device_source = device_source + done;
    } else {
      chunk.region = region;
      chunk.offset = offset + done;
    }
    chunk.address = address + done;
    chunk.length = n;
    chunk.request = request;
    chunks_.push_back(std::move(chunk));
    done += n;
  }
  return staged_;
}

void StagingLink::StageEmptyAnswer(uint64_t request) {
  Chunk chunk;
  chunk.sequence = ++staged_;
  chunk.request = request;  // address and length 0: nothing read, nothing lands
  chunks_.push_back(std::move(chunk));
}

uint64_t StagingLink::RequestRead(uint64_t source, uint64_t length, std::byte* destination) {
  Read read;
  read.sequence = ++requested_;
  read.source = source;
  read.length = length;
  read.destination = destination;
  reads_.push_back(std::move(read));
  return requested_;
}

bool StagingLink::busy() const {
  return !chunks_.empty() || !incoming_.empty() || !reads_.empty() || !answers_.empty() ||
         landed_ > credit_sent_ ||
         publish_step_ < 3 || crediting_ != nullptr;
}

bool StagingLink::copying() const {
  if (std::any_of(incoming_.begin(), incoming_.end(),
                  [](const Incoming& in) { return in.copy.pending(); })) {
    return true;
  }
  return std::any_of(chunks_.begin(), chunks_.end(), [](const Chunk& c) {
    return c.phase == Chunk::Phase::kCopying;
  });
}

void StagingLink::CancelWrite(uint64_t first, uint64_t last) {
  for (Chunk& c : chunks_) {
    if (c.request == 0 && c.sequence >= first && c.sequence <= last &&
        c.phase <= Chunk::Phase::kCopied) {
      c.cancelled = true;
    }
  }
}

bool StagingLink::WriteReleased(uint64_t first, uint64_t last) const {
  return std::none_of(chunks_.begin(), chunks_.end(), [&](const Chunk& c) {
    if (c.request != 0 || c.sequence < first || c.sequence > last) return false;
    switch (c.phase) {
      case Chunk::Phase::kQueued:
      case Chunk::Phase::kCopied:
        return !c.cancelled;
      case Chunk::Phase::kCopying:
        return true;
      case Chunk::Phase::kWriting:  // from the caller's host region
        return c.region != nullptr && c.step != nullptr && !c.step->done;
      default:
        return false;
    }
  });
}

void StagingLink::CancelRead(uint64_t request) {
  for (Read& read : reads_) {
    if (read.sequence == request) read.cancelled = true;
  }
}

bool StagingLink::ReadReleased(uint64_t request) const {
  if (ReadDone(request)) return true;
  const bool cancelled = std::any_of(reads_.begin(), reads_.end(), [&](const Read& read) {
    return read.sequence == request && read.cancelled;
  });
  return cancelled && std::none_of(incoming_.begin(), incoming_.end(), [&](const Incoming& in) {
           return in.request == request && in.copy.pending();
         });
}

void StagingLink::Quiesce() {
  while (!incoming_.empty()) {
    device::QueuedWork& copy = incoming_.front().copy;
    if (copy.pending()) {
      absl::StatusOr<bool> done = copy.Ended();
      if (done.ok() && !*done) break;
      ReturnEvent(copy.Release());
    }
    incoming_.pop_front();
  }
  for (Chunk& c : chunks_) {
    if (c.phase != Chunk::Phase::kCopying) continue;
    absl::StatusOr<bool> done = c.copy.Ended();
    if (done.ok() && !*done) continue;
    ReturnEvent(c.copy.Release());
    c.phase = Chunk::Phase::kCopied;
  }
}

absl::Status StagingLink::Advance(device::Stream& stream) {
  if (!error_.ok()) return error_;
  Endpoint& endpoint = *endpoint_;
  absl::Status status = Publish(endpoint);
  if (status.ok() && !peer_link_.has_value()) {
    absl::StatusOr<std::optional<RemoteRegion>> entry =
        ReadEntry(our_entry_, peer_, peer_incarnation_, backend_, layout::LinkBytes(options_));
    if (!entry.ok()) {
      status = entry.status();
    } else if (entry->has_value()) {
      status = endpoint.Prepare(**entry);
      if (status.ok()) peer_link_ = **entry;
    }
  }
  if (status.ok()) status = Send(endpoint, stream);
  if (status.ok()) status = Receive(endpoint, stream);
  if (!status.ok() && !absl::IsResourceExhausted(status)) error_ = status;
  return error_;
}

absl::Status StagingLink::Publish(Endpoint& endpoint) {
  // Our entry at the peer: its check word and body, a flush, then its
  // length word, so the peer never reads a length before the body is there.
  if (publish_step_ >= 3) return absl::OkStatus();
  if (publishing_ != nullptr) {
    if (!publishing_->done) return absl::OkStatus();
    RETURN_IF_ERROR(publishing_->status);
    publishing_.reset();
    ++publish_step_;
    if (publish_step_ >= 3) return absl::OkStatus();
  }
  auto step = std::make_shared<Step>();
  const uint64_t body = Load(words_.data() + kEntrySource);
  const uint64_t base = static_cast<uint64_t>(our_rank_) * layout::kEntryBytes;
  absl::Status posted;
  switch (publish_step_) {
    case 0:
      posted = endpoint.PostWrite(
          {&words_, kEntrySource + sizeof(uint64_t), sizeof(uint64_t) + body},
          {&peer_directory_, base + sizeof(uint64_t), sizeof(uint64_t) + body},
          std::nullopt, Into(step, &step->done, &step->status));
      break;
    case 1:
      posted = endpoint.PostFlush(Into(step, &step->done, &step->status));
      break;
    default:
      posted = endpoint.PostWrite({&words_, kEntrySource, sizeof(uint64_t)},
                                  {&peer_directory_, base, sizeof(uint64_t)}, std::nullopt,
                                  Into(step, &step->done, &step->status));
  }
  if (absl::IsResourceExhausted(posted)) return absl::OkStatus();  // again later
  RETURN_IF_ERROR(posted);
  publishing_ = std::move(step);
  return absl::OkStatus();
}

absl::Status StagingLink::Send(Endpoint& endpoint, device::Stream& stream) {
  // The peer's count of our chunks landed: copied once, checked, used.
  const uint64_t credit = Load(link_.data() + layout::kCredit);
  if (credit < credited_ || credit > sent_) {
    return absl::DataLossError(absl::StrCat(
        "rank ", peer_, " wrote ", credit, " into its staging credit word, outside [",
        credited_, ", ", sent_, "] (landed before, and sent): a forged or corrupted word"));
  }
  credited_ = credit;
  while (!chunks_.empty() && chunks_.front().phase == Chunk::Phase::kSent &&
         chunks_.front().sequence <= credited_) {
    chunks_.pop_front();
  }
  if (!peer_link_.has_value()) {
    // The peer has not connected back yet.
    if (chunks_.empty() && reads_.empty()) return absl::OkStatus();
    const absl::Time now = absl::Now();
    if (waiting_since_ == absl::InfinitePast()) waiting_since_ = now;
    if (now - waiting_since_ > kConnectBackTimeout) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", peer_, " has not connected back in ", absl::FormatDuration(now - waiting_since_),
          ": a staged write into another host's device memory needs both ranks connected to "
          "each other, and the target progressing"));
    }
    return absl::OkStatus();
  }
  // Waiting for credits only: make sure the peer still lives.
  if (probing_ != nullptr && probing_->done) {
    RETURN_IF_ERROR(probing_->status);
    probing_.reset();
  }
  const bool waiting = (!chunks_.empty() && chunks_.front().phase == Chunk::Phase::kSent) ||
                       (!reads_.empty() && reads_.front().sent);
  if (probing_ == nullptr && waiting && absl::Now() - last_probe_ > kProbeInterval) {
    auto step = std::make_shared<Step>();
    absl::Status posted = endpoint.PostFlush(Into(step, &step->done, &step->status));
    if (!absl::IsResourceExhausted(posted)) {
      RETURN_IF_ERROR(posted);
      probing_ = std::move(step);
      last_probe_ = absl::Now();
    }
  }
  RETURN_IF_ERROR(SendRequests(endpoint));
  const size_t slots = options_.slots;
  // Answers to the peer's reads, a chunk at a time, as slots come free.
  while (!answers_.empty() && chunks_.size() < 2 * slots) {
    Answer& answer = answers_.front();
    if (answer.length == 0) {  // to a void request: one chunk, its header alone
      StageEmptyAnswer(answer.request);
      answers_.pop_front();
      continue;
    }
    const uint64_t n = std::min<uint64_t>(options_.slot_bytes, answer.length - answer.staged);
    StageChunks(nullptr, 0, reinterpret_cast<const std::byte*>(answer.source + answer.staged),
                answer.destination + answer.staged, n, answer.request);
    answer.staged += n;
    answered_bytes_ += n;
    if (answer.staged == answer.length) answers_.pop_front();
  }
  for (Chunk& c : chunks_) {
    const size_t slot = static_cast<size_t>((c.sequence - 1) % slots);
    const uint64_t in_slot = static_cast<uint64_t>(slot) * options_.slot_bytes;
    // Each chunk as far as it goes now; the next one may still start.
    for (bool moved = true; moved;) {
      moved = false;
      const Chunk::Phase was = c.phase;
      if (c.step != nullptr && !c.step->done) break;  // its post is under way
      if (c.step != nullptr) {
        RETURN_IF_ERROR(c.step->status);
        c.step.reset();
      }
      switch (c.phase) {
        case Chunk::Phase::kQueued: {
          // Its slot is free once the chunk `slots` before it landed at the
          // peer and its own posts completed here (it left chunks_).
          if (c.sequence > credited_ + slots ||
              (c.sequence > slots && chunks_.front().sequence <= c.sequence - slots)) {
            return absl::OkStatus();
          }
          if (c.cancelled || c.device_source == nullptr) {
            c.phase = Chunk::Phase::kCopied;  // nothing to copy
            break;
          }
          RETURN_IF_ERROR(
              QueueCopy(stream, outbound_.data() + in_slot, c.device_source, c.length, c.copy));
          c.phase = Chunk::Phase::kCopying;
          break;
        }
        case Chunk::Phase::kCopying: {
          ASSIGN_OR_RETURN(const bool copied, c.copy.Ended());
          if (!copied) break;
          ReturnEvent(c.copy.Release());
          c.phase = Chunk::Phase::kCopied;
          break;
        }
        case Chunk::Phase::kCopied: {
          if (c.cancelled || c.length == 0) {
            // A void chunk, or an empty answer: its header alone.
            c.phase = Chunk::Phase::kFlushing;
            break;
          }
          auto step = std::make_shared<Step>();
          const LocalSlice from = c.device_source != nullptr
                                      ? LocalSlice{&outbound_, in_slot, c.length}
                                      : LocalSlice{c.region, c.offset, c.length};
          RETURN_IF_ERROR(endpoint.PostWrite(
              from, {&*peer_link_, layout::DataOffset(slots) + in_slot, c.length}, std::nullopt,
              Into(step, &step->done, &step->status)));
          c.step = std::move(step);
          c.phase = Chunk::Phase::kWriting;
          break;
        }
        case Chunk::Phase::kWriting: {
          // The data is there before the header says so.
          auto step = std::make_shared<Step>();
          RETURN_IF_ERROR(endpoint.PostFlush(Into(step, &step->done, &step->status)));
          c.step = std::move(step);
          c.phase = Chunk::Phase::kFlushing;
          break;
        }
        case Chunk::Phase::kFlushing: {
          ChunkHeader header = c.cancelled ? ChunkHeader{c.sequence, 0, 0, 0, 0}
                                           : ChunkHeader{c.sequence, c.address, c.length,
                                                         c.request, 0};
          header.check =
              HeaderCheck(header.sequence, header.address, header.length, header.request);
          const size_t source = kHeaderSources + slot * layout::kHeaderBytes;
          EncodeHeader(header, words_.data() + source);
          auto step = std::make_shared<Step>();
          RETURN_IF_ERROR(endpoint.PostWrite(
              {&words_, source, kEncodedHeaderBytes},
              {&*peer_link_, layout::kHeaders + slot * layout::kHeaderBytes, kEncodedHeaderBytes},
              std::nullopt, Into(step, &step->done, &step->status)));
          c.step = std::move(step);
          c.phase = Chunk::Phase::kHeader;
          // The peer may see the header, and credit it, before the post's
          // completion fires here.
          sent_ = std::max(sent_, c.sequence);
          break;
        }
        case Chunk::Phase::kHeader:
          c.phase = Chunk::Phase::kSent;
          break;
        case Chunk::Phase::kSent:
          break;
      }
      moved = c.phase != was;
    }
  }
  return absl::OkStatus();
}

absl::Status StagingLink::Receive(Endpoint& endpoint, device::Stream& stream) {
  // Copies that completed: their chunks landed, in order.
  while (!incoming_.empty()) {
    Incoming& in = incoming_.front();
    if (in.copy.pending()) {
      absl::StatusOr<bool> copied = in.copy.Ended();
      if (!copied.ok()) {
        return absl::Status(copied.status().code(),
                            absl::StrCat("copying rank ", peer_, "'s staged chunk ", in.sequence,
                                         " into device memory: ", copied.status().message()));
      }
      if (!*copied) break;
      ReturnEvent(in.copy.Release());
    }
    landed_ = in.sequence;
    if (in.request != 0) {
      for (Read& read : reads_) {
        if (read.sequence == in.request) read.landed += in.length;
      }
    }
    incoming_.pop_front();
  }
  // Reads whose whole answer landed (a void one: its empty answer), in
  // order.
  while (!reads_.empty() && reads_.front().sent && reads_.front().landed == reads_.front().length &&
         (!reads_.front().voided || reads_.front().answered)) {
    reads_done_ = reads_.front().sequence;
    reads_.pop_front();
  }
  RETURN_IF_ERROR(TakeRequests());
  // New chunks, in sequence order.
  const size_t slots = options_.slots;
  while (incoming_.size() < slots) {
    const uint64_t next = accepted_ + 1;
    const size_t slot = static_cast<size_t>((next - 1) % slots);
    ASSIGN_OR_RETURN(std::optional<ChunkHeader> header,
                     ReadHeader(link_.data() + layout::kHeaders + slot * layout::kHeaderBytes,
                                next, slots, options_.slot_bytes, peer_));
    if (!header.has_value()) break;
    device::QueuedWork copy;
    ASSIGN_OR_RETURN(const bool lands, CheckLanding(*header));
    if (lands) {
      RETURN_IF_ERROR(QueueCopy(stream, reinterpret_cast<void*>(header->address),
                                link_.data() + layout::DataOffset(slots) +
                                    static_cast<size_t>(slot) * options_.slot_bytes,
                                header->length, copy));
    }
    incoming_.push_back({next, header->request, header->length, std::move(copy)});
    accepted_ = next;
  }
  // The count of landed chunks back to the peer, one write at a time.
  if (crediting_ != nullptr) {
    if (!crediting_->done) return absl::OkStatus();
    RETURN_IF_ERROR(crediting_->status);
    crediting_.reset();
  }
  if (landed_ > credit_sent_ && peer_link_.has_value()) {
    StoreSharedWord(words_.data() + kCreditSource, landed_);
    auto step = std::make_shared<Step>();
    RETURN_IF_ERROR(endpoint.PostWrite({&words_, kCreditSource, sizeof(uint64_t)},
                                       {&*peer_link_, layout::kCredit, sizeof(uint64_t)},
                                       std::nullopt, Into(step, &step->done, &step->status)));
    crediting_ = std::move(step);
    credit_sent_ = landed_;
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> StagingLink::CheckLanding(const ChunkHeader& header) {
  if (header.length == 0 && header.request == 0) return false;  // a void chunk
  if (header.length == 0) {
    // The empty answer to a void request of ours, once.
    for (Read& read : reads_) {
      if (read.sequence != header.request || !read.posted || !read.voided || read.answered) {
        continue;
      }
      read.answered = true;
      return false;
    }
    return absl::DataLossError(absl::StrCat(
        "rank ", peer_, "'s staged chunk ", header.sequence, " answers read ", header.request,
        " with nothing, but that read asked for bytes, was answered already, or is not under "
        "way"));
  }
  if (header.request == 0) {
    if (ranges_->Contains(header.address, header.length)) return true;
    return absl::DataLossError(absl::StrCat(
        "rank ", peer_, "'s staged chunk ", header.sequence, " goes to ", header.length,
        " bytes at device address ", header.address,
        ", which lie in no device region of this transport"));
  }
  // An answer: inside the destination of the read it names, and no more
  // than the read asked for.
  for (Read& read : reads_) {
    if (read.sequence != header.request || !read.posted) continue;
    const uint64_t base = reinterpret_cast<uintptr_t>(read.destination);
    if (header.address < base || header.address - base > read.length ||
        header.length > read.length - (header.address - base) ||
        header.length > read.length - read.accepted) {
      break;
    }
    read.accepted += header.length;
    return !read.cancelled;
  }
  return absl::DataLossError(absl::StrCat(
      "rank ", peer_, "'s staged chunk ", header.sequence, " answers read ", header.request,
      " with ", header.length, " bytes at ", header.address,
      ", outside what that read asked for (or no such read is under way)"));
}

absl::Status StagingLink::SendRequests(Endpoint& endpoint) {
  const size_t slots = options_.slots;
  for (Read& read : reads_) {
    if (read.step != nullptr) {
      if (!read.step->done) continue;
      RETURN_IF_ERROR(read.step->status);
      read.step.reset();
      read.sent = true;
    }
    if (read.sent) continue;
    // Its request slot is free once the read `slots` before it is done.
    if (read.sequence > reads_done_ + slots) break;
    const size_t slot = static_cast<size_t>((read.sequence - 1) % slots);
    const size_t source = kHeaderSources + (slots + slot) * layout::kHeaderBytes;
    if (read.cancelled) {
      // Nothing to ask for any more: a void request keeps the sequence,
      // and the peer's empty answer says it took it.
      read.source = 0;
      read.length = 0;
      read.destination = nullptr;
      read.voided = true;
    }
    EncodeRequest({read.sequence, read.source, read.length,
                   reinterpret_cast<uintptr_t>(read.destination), 0},
                  words_.data() + source);
    auto step = std::make_shared<Step>();
    absl::Status posted = endpoint.PostWrite(
        {&words_, source, kEncodedHeaderBytes},
        {&*peer_link_, layout::RequestOffset(slots) + slot * layout::kHeaderBytes,
         kEncodedHeaderBytes},
        std::nullopt, Into(step, &step->done, &step->status));
    if (absl::IsResourceExhausted(posted)) break;
    RETURN_IF_ERROR(posted);
    read.step = std::move(step);
    read.posted = true;
  }
  return absl::OkStatus();
}

absl::Status StagingLink::TakeRequests() {
  // The peer's reads of our device memory: each answered by chunks, as a
  // write of ours into its destination.
  const size_t slots = options_.slots;
  // At most `slots` answers under way: a peer cannot make us hold more.
  while (answers_.size() < slots) {
    const uint64_t next = requests_taken_ + 1;
    const size_t slot = static_cast<size_t>((next - 1) % slots);
    ASSIGN_OR_RETURN(std::optional<ReadRequest> request,
                     ReadRequestAt(link_.data() + layout::RequestOffset(slots) +
                                       slot * layout::kHeaderBytes,
                                   next, slots, peer_));
    if (!request.has_value()) break;
    requests_taken_ = next;
    // A void request: its answer is empty (no source to check).
    if (request->length != 0 && !ranges_->Contains(request->source, request->length)) {
      return absl::DataLossError(absl::StrCat(
          "rank ", peer_, "'s read request ", next, " asks for ", request->length,
          " bytes at device address ", request->source,
          ", which lie in no device region of this transport"));
    }
    answers_.push_back({next, request->source, request->destination, request->length, 0});
  }
  return absl::OkStatus();
}

}  // namespace rdmaflow::rdma::device_path
