// File: host_allreduce.cc
#include "collectives/host_allreduce.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/call_word.h"
#include "collectives/members.h"
#include "collectives/peer_process.h"
#include "collectives/shared_segments.h"
#include "common/annotate.h"
#include "common/shared_word.h"
#include "common/status_macros.h"
#include "onesided/progress/waits.h"
#include "rdma/rendezvous.h"
#include "rdma/slice.h"

namespace rdmaflow::collectives {
namespace {

namespace layout = host_allreduce_layout;

uint64_t Load(const std::byte* word) { return LoadSharedWord(word); }
void Store(std::byte* word, uint64_t value) { StoreSharedWord(word, value); }

// Elements [begin, begin + length) of segment `k` of `count` among `n`
// (the first count % n one element longer).
struct Range {
  size_t begin;
  size_t length;
};
Range SegmentOf(size_t count, size_t n, size_t k) {
  const size_t base = count / n;
  const size_t extra = count % n;
  return {k * base + std::min(k, extra), base + (k < extra ? 1 : 0)};
}

// CPUs the members can share: this process's allowed CPUs (a cpuset or a
// container's), unless it is pinned to one, as launchers pin each rank to
// a core of its own, which is when spinning is cheapest; then the host's.
int HostCpus() {
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  const int host = online > 0 ? static_cast<int>(online) : 1;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return host;
  const int allowed = CPU_COUNT(&set);
  return allowed <= 1 ? host : std::min(host, allowed);
}

}  // namespace

struct HostAllReduce::Peer {
  int rank = -1;
  rdma::Endpoint* endpoint = nullptr;  // the links' data lane
  rdma::RemoteRegion data_descriptor, control_descriptor;
  std::byte* data = nullptr;     // mapped: the peer's data region
  std::byte* control = nullptr;  // mapped: the peer's control block
  // Its `reduced` counter when this call began: the chunks of its
  // segments in all earlier calls, which every member knows.
  uint64_t reduced_base = 0;
  size_t offset = 0;  // where its range of the call under way starts (checked)
  // Its process, when the members agreed on reads of each other's
  // (external()), and its range's address there in the call under way
  // (0: in its region, at `offset`).
  std::optional<PeerProcess> process;
  uint64_t external = 0;
  // That range in our mapping of the shared segment it published, when it
  // did and the mapping worked (else null: read out of its process).
  const std::byte* mapped = nullptr;
};

std::string HostAllReduce::LayoutText(const HostAllReduceOptions& o, size_t capacity,
                                      const std::vector<int>& members) {
  return absl::StrCat("one_shot_max=", o.one_shot_max_bytes, " chunk=", o.chunk_bytes,
                      " capacity=", capacity, " members=", absl::StrJoin(members, ","),
                      " memory=", o.mover != nullptr ? o.mover->kind() : "host");
}

absl::StatusOr<std::unique_ptr<HostAllReduce>> HostAllReduce::Create(
    rdma::Transport& transport, rdma::Store& store, const std::string& ns,
    std::vector<int> members, const rdma::MemoryRegion& data,
    const HostAllReduceOptions& options) {
  const std::string what = absl::StrCat("host all-reduce '", options.name, "'");
  if (options.loop == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": needs the transport's progress loop"));
  }
  ASSIGN_OR_RETURN(onesided::OwnLinks own,
                   onesided::MakeOwnLinks(transport, store, ns, options.loop, {}, options.timeout,
                                          what));
  ASSIGN_OR_RETURN(std::unique_ptr<HostAllReduce> host,
                   Create(*own.links, std::move(members), data, options));
  host->own_ = std::move(own);
  return host;
}

absl::StatusOr<std::unique_ptr<HostAllReduce>> HostAllReduce::Create(
    onesided::PeerLinks& links, std::vector<int> members, const rdma::MemoryRegion& data,
    const HostAllReduceOptions& options) {
  rdma::Transport& transport = links.transport();
  const std::string what = absl::StrCat("host all-reduce '", options.name, "'");
  if (options.chunk_bytes < 64 || options.chunk_bytes % 64 != 0 ||
      options.one_shot_max_bytes > data.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": needs chunk_bytes >= 64 and a multiple of 64, and one_shot_max_bytes "
        "no larger than the data region (got chunk ", options.chunk_bytes,
        ", one_shot_max ", options.one_shot_max_bytes, ", region ", data.size(), ")"));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": timeout must be positive"));
  }
  if (options.loop != nullptr && options.loop != &links.loop()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": options.loop is not the loop of its links"));
  }
  if (!links.loop().OnLoopThread()) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": its progress loop belongs to another thread (docs/thread_model.md)"));
  }
  ASSIGN_OR_RETURN(const int position, PositionOf(members, transport.rank(), what));
  HostAllReduceOptions on_links = options;
  on_links.loop = &links.loop();
  std::unique_ptr<HostAllReduce> host(
      new HostAllReduce(links, std::move(members), position, data, on_links));
  host->spin_for_ = options.spin_for >= absl::ZeroDuration()
                        ? options.spin_for
                        : (host->size() <= HostCpus() ? absl::Microseconds(50)
                                                           : absl::ZeroDuration());
  host->yield_ = options.yield_while_cheap && host->spin_for_ == absl::ZeroDuration();
  ASSIGN_OR_RETURN(rdma::MemoryRegion control, transport.Allocate(layout::kBytes));
  std::memset(control.data(), 0, control.size());
  host->control_ = std::make_unique<rdma::MemoryRegion>(std::move(control));
  host->mover_ = options.mover != nullptr ? options.mover : &host->host_mover_;
  ASSIGN_OR_RETURN(host->scratch_, host->mover_->Scratch(options.one_shot_max_bytes));
  RETURN_IF_ERROR(host->Connect());
  return host;
}

HostAllReduce::HostAllReduce(onesided::PeerLinks& links, std::vector<int> members,
                             int position, const rdma::MemoryRegion& data,
                             const HostAllReduceOptions& options)
    : links_(links),
      transport_(links.transport()),
      members_(std::move(members)),
      position_(position),
      data_(data),
      options_(options),
      // Room for every peer's segment of a call, and as many again for the
      // buffers that come back call after call; 1 GiB of them kept past
      // their call, as the owners' pools keep as much.
      segment_maps_(std::max<size_t>(16, 2 * this->members_.size()), size_t{1} << 30) {}

HostAllReduce::~HostAllReduce() {
  onesided::ProgressLoop* loop = options_.loop;
  loop->CheckOnLoopThread(Where() + "'s destructor");
  for (int64_t watch : watches_) links_.Unsubscribe(watch);
  // No operation of ours is ever posted (loads and stores only): nothing to
  // fence. The peers' memory stays mapped by the links' endpoints.
  if (published_ && !quiesced_ && control_ != nullptr) {
    std::fprintf(stderr,
                 "rdmaflow: %s: leaving its %zu-byte control block allocated: no "
                 "Shutdown() barrier passed, so a peer may still read it\n",
                 Where().c_str(), control_->size());
    control_.release();
  }
}

std::string HostAllReduce::Where() const {
  return absl::StrCat("host all-reduce '", options_.name, "' on rank ", transport_.rank(),
                      " (position ", position_, " of ", size(), ")");
}

absl::Time HostAllReduce::Deadline() const { return absl::Now() + options_.timeout; }

bool HostAllReduce::OneShot(size_t bytes) const {
  return bytes <= options_.one_shot_max_bytes;
}

absl::Status HostAllReduce::Connect() {
  const int rank = transport_.rank();
  published_ = true;  // from here on, a peer may map our regions
  ASSIGN_OR_RETURN(std::vector<onesided::PeerRegions> theirs,
                   links_.Exchange({absl::StrCat("host/", options_.name),
                                    LayoutText(options_, data_.size(), members_),
                                    {{"data", &data_}, {"control", control_.get()}}},
                                   members_, Where()));
  peers_.resize(members_.size());
  // Map every peer's regions; the first that does not map is our answer.
  // A transport that never maps answers at once, without connecting.
  std::string refusal;
  if (!transport_.capabilities().maps_peer_memory) {
    refusal = absl::StrCat("rank ", rank, "'s transport (", transport_.capabilities().backend,
                           ") cannot map a peer's memory");
  }
  for (const onesided::PeerRegions& regions : theirs) {
    const int p = static_cast<int>(
        std::find(members_.begin(), members_.end(), regions.rank) - members_.begin());
    Peer& peer = peers_[p];
    peer.rank = regions.rank;
    peer.data_descriptor = regions.regions[0];
    peer.control_descriptor = regions.regions[1];
    if (peer.data_descriptor.length != data_.size() ||
        peer.control_descriptor.length < layout::kBytes) {
      return absl::FailedPreconditionError(absl::StrCat(
          Where(), ": rank ", peer.rank, " published a data region of ",
          peer.data_descriptor.length, " bytes (ours: ", data_.size(),
          ") and a control block of ", peer.control_descriptor.length, " (needs ",
          layout::kBytes, ")"));
    }
    if (!refusal.empty()) continue;
    ASSIGN_OR_RETURN(peer.endpoint, links_.Lane(peer.rank));
    absl::StatusOr<std::byte*> data =
        mover_->MapPeer(*peer.endpoint, {&peer.data_descriptor, 0, peer.data_descriptor.length});
    absl::StatusOr<std::byte*> control =
        data.ok() ? peer.endpoint->MapRemote({&peer.control_descriptor, 0, layout::kBytes})
                  : data;
    if (!control.ok()) {
      refusal = absl::StrCat("rank ", rank, " cannot map rank ", peer.rank, "'s memory: ",
                             control.status().message());
      continue;
    }
    peer.data = *data;
    peer.control = *control;
  }
  // Every member says whether it mapped all its peers, and each reads every
  // answer, so they all reach the same verdict.
  rdma::Store& store = links_.store();
  const std::string scope = absl::StrCat("host/", options_.name);
  RETURN_IF_ERROR(store.Set(links_.StoreKey(scope, rank, "mapped"),
                             refusal.empty() ? std::string("ok") : refusal));
  for (int p = 0; p < size(); ++p) {
    if (p == position_) continue;
    const std::string key = links_.StoreKey(scope, members_[p], "mapped");
    ASSIGN_OR_RETURN(std::string answer, store.Get(key, options_.timeout));
    if (answer != "ok" && refusal.empty()) refusal = std::move(answer);
  }
  if (!refusal.empty()) {
    // Every member refuses too, and none reads a control word after the
    // verdict: the block may be freed.
    quiesced_ = true;
    return absl::UnimplementedError(absl::StrCat(
        Where(), ": no direct access among the members (", refusal,
        "); use the ring (RingAllReduce)"));
  }
  block_ = control_->data();
  RETURN_IF_ERROR(AgreeOnExternal(scope));
  // A failed probe, or a sever by any protocol on the links (which unmaps
  // the peer's memory): the collective fails, and the peer's mappings are
  // never touched again (every wait checks failure_ before it reads them;
  // RingPeers() skips a null control block).
  auto fail = [this](int rank, const absl::Status& status) {
    if (failure_.ok()) failure_ = status;
    for (Peer& peer : peers_) {
      // Severed (not only a failed probe): its mappings are gone.
      if (peer.rank != rank || links_.PeerStatus(rank).ok()) continue;
      peer.data = nullptr;
      peer.control = nullptr;
    }
  };
  for (Peer& peer : peers_) {
    if (peer.endpoint == nullptr) continue;
    ASSIGN_OR_RETURN(const int64_t watch, links_.Subscribe(peer.rank, fail));
    watches_.push_back(watch);
    peer_ranks_.push_back(peer.rank);
  }
  return absl::OkStatus();
}

absl::Status HostAllReduce::AgreeOnExternal(const std::string& scope) {
  // Only on host memory (a device mover's ranges are device pointers; the
  // layouts agree on the memory's kind, so every member skips alike). A
  // member with the reads off in its options answers so in the same
  // rounds, and every member stages: options that differ between members
  // are no error.
  if (mover_ != &host_mover_) {
    external_refusal_ = "the data region is device memory";
    return absl::OkStatus();
  }
  const int rank = transport_.rank();
  rdma::Store& store = links_.store();
  RETURN_IF_ERROR(store.Set(links_.StoreKey(scope, rank, "process"),
                             FormatProcessToken(OwnProcessToken())));
  std::string refusal;
  if (!options_.external_reads) {
    refusal = absl::StrCat("rank ", rank, ": off in its options");
  }
  for (int p = 0; p < size() && options_.external_reads; ++p) {
    if (p == position_) continue;
    Peer& peer = peers_[p];
    ASSIGN_OR_RETURN(const std::string text,
                     store.Get(links_.StoreKey(scope, peer.rank, "process"), options_.timeout));
    absl::StatusOr<ProcessToken> token = ParseProcessToken(text);
    absl::StatusOr<PeerProcess> process =
        token.ok() ? PeerProcess::Open(*token, absl::StrCat("rank ", peer.rank))
                   : absl::StatusOr<PeerProcess>(token.status());
    if (!process.ok()) {
      if (refusal.empty()) {
        refusal = absl::StrCat("rank ", rank, ": ", process.status().message());
      }
      continue;
    }
    peer.process = *std::move(process);
  }
  RETURN_IF_ERROR(store.Set(links_.StoreKey(scope, rank, "external"),
                             refusal.empty() ? std::string("ok") : refusal));
  for (int p = 0; p < size(); ++p) {
    if (p == position_) continue;
    ASSIGN_OR_RETURN(std::string answer,
                     store.Get(links_.StoreKey(scope, members_[p], "external"),
                               options_.timeout));
    if (answer != "ok" && refusal.empty()) {
      // A peer's words: quoted, and bounded.
      refusal = absl::StrCat("rank ", members_[p], " says '",
                             absl::CHexEscape(answer.substr(0, 300)), "'");
    }
  }
  external_ok_ = refusal.empty();
  external_refusal_ = std::move(refusal);
  if (!external_ok_) {
    for (Peer& peer : peers_) peer.process.reset();
  }
  return absl::OkStatus();
}

absl::StatusOr<const std::byte*> HostAllReduce::PeerBytes(const Peer& peer, size_t at,
                                                          size_t bytes, size_t slot,
                                                          size_t until) {
  if (peer.external == 0) return peer.data + peer.offset + at;
  if (peer.mapped != nullptr) {
    ++stats_.segment_reads;
    stats_.segment_bytes_read += static_cast<int64_t>(bytes);
    return peer.mapped + at;
  }
  if (bytes == 0) {  // nothing to read (an empty call): any valid pointer
    static const std::byte kNothing{};
    return &kNothing;
  }
  // A system call costs about what copying 16 KiB does, and the kernel's
  // copy runs about 25% faster in reads of 256 KiB than of 64 KiB (this
  // project's 2-core VM): read ahead that much, still within L2.
  constexpr size_t kReadAhead = size_t{256} << 10;
  if (slot_bytes_ < bytes) {
    slot_bytes_ = std::max({bytes, kReadAhead, options_.chunk_bytes,
                            options_.one_shot_max_bytes});
    slot_bytes_ = (slot_bytes_ + 63) / 64 * 64;  // every slot 64-byte aligned
    process_scratch_.assign(slot_bytes_ * static_cast<size_t>(size() - 1), std::byte{0});
    slot_holds_.assign(static_cast<size_t>(size() - 1), SlotHolds{});
  }
  std::byte* base = process_scratch_.data() + slot * slot_bytes_;
  SlotHolds& holds = slot_holds_[slot];
  if (holds.call != calls_ || at < holds.begin || at + bytes > holds.end) {
    const size_t read = std::max(bytes, std::min(slot_bytes_, until > at ? until - at : 0));
    holds = {};
    RETURN_IF_ERROR(CopyFromPeer(peer, at, read, base));
    holds = {calls_, at, at + read};
  }
  return base + (at - holds.begin);
}

const std::byte* HostAllReduce::MapSegment(const Peer& peer, uint64_t fd, uint64_t token,
                                          uint64_t offset, size_t bytes) {
  const int64_t mapped_before = segment_maps_.stats().mapped;
  // A word beyond int64 reads as negative: refused as forged.
  // Its epoch is the call, whose pointers into the mappings must hold.
  absl::StatusOr<absl::Span<const std::byte>> segment =
      segment_maps_.Map(peer.process->pid(), static_cast<int64_t>(fd), token,
                        peer.process->name(), calls_);
  stats_.segments_mapped += segment_maps_.stats().mapped - mapped_before;
  if (segment.ok() && offset <= segment->size() && bytes <= segment->size() - offset) {
    return segment->data() + offset;
  }
  ++stats_.segment_fallbacks;
  if (segment_refusal_.empty()) {
    segment_refusal_ =
        segment.ok() ? absl::StrCat("rank ", peer.rank, " published ", bytes, " bytes at offset ",
                                    offset, " of its ", segment->size(), "-byte segment")
                     : std::string(segment.status().message());
  }
  return nullptr;
}

absl::Status HostAllReduce::CopyFromPeer(const Peer& peer, size_t at, size_t bytes,
                                         std::byte* dst) {
  if (peer.external == 0) return mover_->Copy(dst, peer.data + peer.offset + at, bytes);
  if (peer.mapped != nullptr) {
    ++stats_.segment_reads;
    stats_.segment_bytes_read += static_cast<int64_t>(bytes);
    return mover_->Copy(dst, peer.mapped + at, bytes);
  }
  // Enter() accepted the address only with a process to read it from, and
  // checked that the call's range does not wrap.
  ++stats_.process_reads;
  stats_.process_bytes_read += static_cast<int64_t>(bytes);
  absl::Status read = peer.process->Read(peer.external + at, bytes, dst);
  if (!read.ok() && peer.control != nullptr) {
    // The owner may have given up and freed its buffer: say so first.
    RETURN_IF_ERROR(CheckNotAborted(peer, Load(peer.control + layout::kDone)));
  }
  return read;
}

template <typename Ready>
absl::Status HostAllReduce::WaitFor(uint64_t call, const char* what, bool any,
                                    Ready ready) {
  // Which peer is still awaited, and any forged word seen.
  Peer* missing = nullptr;
  absl::Status forged;
  auto all_ready = [&] {
    if (!failure_.ok()) return true;
    for (int p = 0; p < size(); ++p) {
      Peer& peer = peers_[p];
      if (p == position_) continue;
      absl::StatusOr<bool> is = ready(peer);
      if (!is.ok()) {
        forged = is.status();
        return true;
      }
      if (*is && any) return true;
      if (!*is && !any) {
        missing = &peer;
        return false;
      }
      if (!*is && missing == nullptr) missing = &peer;
    }
    return !any;
  };
  // A peer is usually microseconds away: where every member has a core of
  // its own, poll its words (loads only) for as long as a sleep would cost
  // before waiting through the loop, whose waits sleep after a few rounds.
  if (spin_for_ > absl::ZeroDuration() && !all_ready()) {
    const absl::Time until = absl::Now() + spin_for_;
    for (int round = 1; !all_ready(); ++round) {
      if (round % 64 == 0 && absl::Now() >= until) break;
    }
  }
  if (!all_ready()) {
    // Then wait through the loop, with its "no progress for T" policy: the
    // timeout runs from the last time an awaited peer became ready. Between
    // rounds the thread sleeps on our doorbell, which a peer rings when it
    // publishes a word while we wait: the wake-up comes with the word, not
    // a timer later (at most 1 ms per sleep, then the loop polls the
    // transport and probes the peers).
    onesided::ProgressLoop& loop = *options_.loop;
    const uint64_t wait = ++waits_;
    bool ready_now = false;
    Peer* last_missing = missing;
    absl::Status waited = loop.WaitForProgress(
        [&](bool& moved) -> absl::Status {
          absl::StatusOr<int> polled = loop.Poll();
          if (!polled.ok()) return polled.status();
          missing = nullptr;
          ready_now = all_ready();
          // Peers become ready one way only: the first one missing moved.
          moved = missing != last_missing;
          last_missing = missing;
          return absl::OkStatus();
        },
        [&] { return ready_now; }, options_.timeout,
        [&] {
          return absl::StrCat(any ? "any peer's " : "", what, " (", any ? "e.g. " : "",
                              "rank ", missing != nullptr ? missing->rank : -1, ") in call ",
                              call, " (do all members run the same all-reduce calls?)");
        },
        peer_ranks_,
        [&](absl::Duration limit) {
          if (yield_ && yield_gate_.Open(wait)) {
            // Hand the core to a peer that shares it, unless the last
            // yields showed other work takes it for a time slice.
            const auto start = std::chrono::steady_clock::now();
            sched_yield();
            const auto took = std::chrono::steady_clock::now() - start;
            yield_gate_.Yielded(wait, absl::FromChrono(took));
            stats_.yields = yield_gate_.yields();
            stats_.slow_yields = yield_gate_.slow_yields();
            return;
          }
          SleepUntilRung(all_ready, std::min(limit, absl::Milliseconds(1)));
        });
    if (!waited.ok()) return waited;
  }
  if (!forged.ok()) return forged;
  return failure_;
}

template <typename Ready>
void HostAllReduce::SleepUntilRung(Ready& ready, absl::Duration limit) {
  auto* bell = reinterpret_cast<uint32_t*>(block_ + layout::kBell);
  const uint32_t seen = __atomic_load_n(bell, __ATOMIC_ACQUIRE);
  // Say we sleep, then look once more: a peer that publishes after this
  // store sees it and rings (both sides order store before load).
  __atomic_store_n(reinterpret_cast<uint64_t*>(block_ + layout::kWaiting), 1, __ATOMIC_SEQ_CST);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);  // the store before ready()'s loads
  if (!ready()) {
    const timespec ts = absl::ToTimespec(limit);
    // Not FUTEX_PRIVATE: the bell is in memory our peers map.
    syscall(SYS_futex, bell, FUTEX_WAIT, seen, &ts, nullptr, 0);
  }
  __atomic_store_n(reinterpret_cast<uint64_t*>(block_ + layout::kWaiting), 0, __ATOMIC_RELAXED);
}

void HostAllReduce::RingPeers() {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);  // our word before their flags
  for (Peer& peer : peers_) {
    if (peer.control == nullptr) continue;
    if (__atomic_load_n(reinterpret_cast<const uint64_t*>(peer.control + layout::kWaiting),
                        __ATOMIC_RELAXED) == 0) {
      continue;
    }
    auto* bell = reinterpret_cast<uint32_t*>(peer.control + layout::kBell);
    __atomic_fetch_add(bell, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, bell, FUTEX_WAKE, 1, nullptr, nullptr, 0);
  }
}

absl::Status HostAllReduce::AllReduce(size_t offset, size_t count, DataType type,
                                      ReduceOp op, uint8_t variant, std::byte* result) {
  // A result buffer in the region would be read by the peers while we
  // write it: refused as a bad range is (every member gets an error).
  const size_t element = ElementSize(type);
  absl::Status bad_result;
  if (result != nullptr && element > 0 && count > 0 && count <= data_.size() / element) {
    const auto at = reinterpret_cast<uintptr_t>(result);
    const auto region = reinterpret_cast<uintptr_t>(data_.data());
    if (at < region + data_.size() && region < at + count * element) {
      bad_result = absl::InvalidArgumentError(
          absl::StrCat(Where(), ": the result buffer overlaps the data region"));
    }
  }
  if (bad_result.ok()) bad_result = mover_->Supports(type, op);
  absl::Status status = Run(
      offset, count, element, DataTypeName(type),
      call_word::Pack(layout::kAllReduceCall, -1, type, op, variant), /*root=*/-1,
      [&](uint64_t call, size_t bytes) {
        return OneShot(bytes) ? OneShotCall(call, offset, bytes, count, type, op, -1, result)
                              : ScatterGatherCall(call, offset, count, type, op, -1, result);
      },
      bad_result);
  if (status.ok() && size() == 1 && result != nullptr && count > 0) {
    // Alone: no body ran.
    status = mover_->Copy(result, data_.data() + offset, count * element);
    if (status.ok()) status = mover_->Fence(Deadline(), "the copy into the result buffer");
    if (!status.ok()) status = Annotate(status, Where());
  }
  return status;
}

absl::Status HostAllReduce::AllReduceExternal(std::byte* buffer, size_t count,
                                              DataType type, ReduceOp op, uint8_t variant) {
  absl::Status bad = mover_->Supports(type, op);
  if (!external_ok_) {
    bad = absl::FailedPreconditionError(absl::StrCat(
        Where(), ": a range outside the data region needs reads of the peers' process "
        "memory, which the members did not agree on (", external_refusal_, ")"));
  } else if (buffer == nullptr && count > 0) {
    bad = absl::InvalidArgumentError(absl::StrCat(Where(), ": a null buffer of ", count,
                                                  " elements"));
  } else if (ElementSize(type) > 0 &&
             reinterpret_cast<uintptr_t>(buffer) % ElementSize(type) != 0) {
    bad = absl::InvalidArgumentError(absl::StrCat(
        Where(), ": the buffer at 0x", absl::Hex(reinterpret_cast<uintptr_t>(buffer)),
        " is not aligned to ", DataTypeName(type), " elements"));
  }
  ++stats_.external_calls;
  // Run() checks the count against the address space instead of the region.
  static std::byte empty;
  external_ = buffer != nullptr ? buffer : &empty;
  const absl::Cleanup done = [this] { external_ = nullptr; };
  const uint64_t type_op = call_word::Pack(layout::kAllReduceCall, -1, type, op, variant);
  return Run(
      0, count, ElementSize(type), DataTypeName(type), type_op, /*root=*/-1,
      [&](uint64_t call, size_t bytes) {
        return OneShot(bytes) ? OneShotCall(call, 0, bytes, count, type, op, -1, nullptr)
                              : ScatterGatherCall(call, 0, count, type, op, -1, nullptr);
      },
      bad);
}

absl::Status HostAllReduce::Reduce(size_t offset, size_t count, DataType type, ReduceOp op,
                                   int root, uint8_t variant) {
  return Run(offset, count, ElementSize(type), DataTypeName(type),
             call_word::Pack(layout::kReduceCall, root, type, op, variant), root,
             [&](uint64_t call, size_t bytes) {
               return OneShot(bytes)
                          ? OneShotCall(call, offset, bytes, count, type, op, root, nullptr)
                          : ScatterGatherCall(call, offset, count, type, op, root, nullptr);
             },
             mover_->Supports(type, op));
}

absl::Status HostAllReduce::Broadcast(size_t offset, size_t bytes, int root,
                                     uint8_t variant) {
  return Run(offset, bytes, 1, "byte",
             call_word::Pack(layout::kBroadcastCall, root, DataType{}, ReduceOp{}, variant),
             root,
             [&](uint64_t call, size_t) {
               if (position_ != root) {
                 const Peer& from = peers_[root];
                 RETURN_IF_ERROR(CopyFromPeer(from, 0, bytes, data_.data() + offset));
                 RETURN_IF_ERROR(mover_->Fence(Deadline(), "the broadcast's copy"));
                 ++stats_.reads;
                 stats_.bytes_read += static_cast<int64_t>(bytes);
               }
               // The root leaves after every member has copied.
               return Leave(call);
             });
}

template <typename Body>
absl::Status HostAllReduce::Run(size_t offset, size_t count, size_t element,
                                absl::string_view unit, uint64_t type_op, int root,
                                Body body, absl::Status bad_argument) {
  if (!failure_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        Where(), ": unusable after an earlier error: ", failure_.message()));
  }
  // A bad range or root is ours alone (each member passes its own offset):
  // the call still meets the others, as one that differs from theirs (a
  // type/op word no call has), so they get an error too instead of a
  // wait, and the collective stays usable.
  absl::Status bad_range;
  if (element == 0 || offset % element != 0) {
    bad_range = absl::InvalidArgumentError(absl::StrCat(
        Where(), ": offset ", offset, " is not aligned to ", unit, " elements"));
  } else if (external_ != nullptr ? count > SIZE_MAX / element
                                   : offset > data_.size() ||
                                         count > (data_.size() - offset) / element) {
    bad_range = external_ != nullptr ? absl::OutOfRangeError(absl::StrCat(
        Where(), ": ", count, " ", unit, " elements do not fit in an address space")) :
        absl::OutOfRangeError(absl::StrCat(
        Where(), ": ", count, " ", unit, " elements at offset ", offset,
        " exceed its data region of ", data_.size(), " bytes"));
  } else if ((((type_op >> 24) & 0xff) == layout::kAllReduceCall ? root != -1 : root < 0) ||
             root >= size()) {
    bad_range = absl::InvalidArgumentError(absl::StrCat(
        Where(), ": root position ", root, " is not a member's (0..", size() - 1, ")"));
  }
  if (bad_range.ok()) bad_range = bad_argument;
  if (!bad_range.ok() && size() == 1) return bad_range;
  // An empty call still meets the others, so a member whose count differs
  // gets an error rather than a wait.
  const uint64_t call = ++calls_;
  ++stats_.calls;
  const size_t bytes = bad_range.ok() ? count * element : 0;
  bool differs = false;
  absl::Status status = Enter(call, bad_range.ok() ? offset : 0, count, element, type_op,
                              /*poisoned=*/!bad_range.ok(), differs);
  if (differs) {
    // Every member sees a call that differs from its own (each compares
    // with all the others) before anyone reads data: all leave the call
    // together and the collective stays usable.
    absl::Status left = Leave(call);
    if (left.ok()) return bad_range.ok() ? Annotate(status, Where()) : bad_range;
    status = left;
  } else if (status.ok()) {
    status = size() == 1 ? Leave(call) : body(call, bytes);
  }
  if (!status.ok()) {
    // Our buffer may change as soon as we return: a peer still reading it
    // must not take what it reads for this call's data (it checks for this
    // mark after its last read).
    Store(block_ + layout::kDone, call | layout::kAborted);
    RingPeers();
    // Device work this call queued (a reduction reading the peers' buffers,
    // a copy into the caller's result) ends before the call does: once we
    // return, the caller may free its result. (The host mover has none.)
    // Published first, the abort above lets no peer wait for this.
    if (absl::Status drained = mover_->Fence(Deadline(), "device work of a failed call");
        absl::IsDeadlineExceeded(drained)) {
      status = absl::DeadlineExceededError(absl::StrCat(
          status.message(), "; and its device work still ran at its deadline (", drained.message(),
          "): keep the result buffer, the device may yet write it"));
    }
    if (failure_.ok()) failure_ = status;
    return Annotate(status, Where());
  }
  return absl::OkStatus();
}

void HostAllReduce::Abandon(const absl::Status& why) {
  if (failure_.ok()) failure_ = why.ok() ? absl::AbortedError("abandoned") : why;
  if (block_ == nullptr) return;
  Store(block_ + layout::kDone, (calls_ + 1) | layout::kAborted);
  RingPeers();
}

absl::Status HostAllReduce::CheckNotAborted(const Peer& peer, uint64_t done) const {
  if ((done & layout::kAborted) == 0) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat(
      "rank ", peer.rank, " gave up during its call ", done & ~layout::kAborted,
      " (its own error says why), so what was read from it cannot be trusted"));
}

absl::Status HostAllReduce::Enter(uint64_t call, size_t offset, size_t count, size_t element,
                                  uint64_t type_op, bool poisoned, bool& differs) {
  if (poisoned) type_op = layout::kPoisonedCall;
  Store(block_ + layout::kExternal,
        external_ != nullptr && !poisoned ? reinterpret_cast<uintptr_t>(external_) : 0);
  // Run() checked that count * element fits.
  const std::optional<SegmentRef> segment =
      external_ != nullptr && !poisoned && count > 0
          ? SharedSegments::Process().Find(external_, count * element)
          : std::nullopt;
  Store(block_ + layout::kSegmentFd, segment.has_value() ? uint64_t(segment->fd) + 1 : 0);
  Store(block_ + layout::kSegmentToken, segment.has_value() ? segment->token : 0);
  Store(block_ + layout::kSegmentOffset, segment.has_value() ? segment->offset : 0);
  Store(block_ + layout::kOffset, offset);
  Store(block_ + layout::kCount, count);
  Store(block_ + layout::kTypeOp, type_op);
  Store(block_ + layout::kEntered, call);
  RingPeers();
  RETURN_IF_ERROR(WaitFor(call, "entry", /*any=*/false, [&](Peer& peer) -> absl::StatusOr<bool> {
    RETURN_IF_ERROR(CheckNotAborted(peer, Load(peer.control + layout::kDone)));
    const uint64_t entered = Load(peer.control + layout::kEntered);
    if (entered > call) {
      return absl::DataLossError(absl::StrCat(
          "rank ", peer.rank, " wrote call number ", entered, " into its control block while "
          "call ", call, " is under way: a forged or corrupted word"));
    }
    return entered == call;
  }));
  if (poisoned) {  // every member ends this call, with or without our word
    differs = true;
    return absl::OkStatus();
  }
  // Every peer entered: their arguments stay put until we are done. Count,
  // kind, type, operator and root must match; each member's range may lie
  // at its own offset, which is untrusted until checked against the region.
  const size_t bytes = count * element;
  for (int p = 0; p < size(); ++p) {
    if (p == position_) continue;
    Peer& peer = peers_[p];
    // Each word loaded once: the peer may rewrite them while we check.
    const uint64_t theirs[7] = {Load(peer.control + layout::kOffset),
                                Load(peer.control + layout::kCount),
                                Load(peer.control + layout::kTypeOp),
                                Load(peer.control + layout::kExternal),
                                Load(peer.control + layout::kSegmentFd),
                                Load(peer.control + layout::kSegmentToken),
                                Load(peer.control + layout::kSegmentOffset)};
    if (theirs[1] != count || theirs[2] != type_op) {
      differs = true;
      return absl::InvalidArgumentError(absl::StrCat(
          "call ", call, " differs between members: rank ", peer.rank, " called ",
          call_word::Describe(theirs[0], theirs[1], theirs[2]), ", rank ", transport_.rank(),
          " called ", call_word::Describe(offset, count, type_op),
          "; every member must make the same all-reduces (and reduces and broadcasts: "
          "count, type, operator, root) in the same order"));
    }
    peer.external = theirs[3];
    peer.mapped = nullptr;
    if (peer.external != 0) {
      // Its range lies in its process: readable only where the members
      // agreed on it, and never wrapping the address space.
      if (!peer.process.has_value() || peer.external > UINT64_MAX - bytes) {
        return absl::DataLossError(absl::StrCat(
            "rank ", peer.rank, " published address 0x", absl::Hex(peer.external), " for ",
            bytes, " bytes of its process memory in call ", call, ", ",
            peer.process.has_value() ? "which wraps the address space"
                                     : "but the members did not agree on such reads",
            ": a forged or corrupted word"));
      }
      peer.offset = 0;
      if (theirs[4] != 0) {
        peer.mapped = MapSegment(peer, theirs[4] - 1, theirs[5], theirs[6], bytes);
      }
      continue;
    }
    if (theirs[0] % element != 0 || theirs[0] > data_.size() ||
        bytes > data_.size() - theirs[0]) {
      return absl::DataLossError(absl::StrCat(
          "rank ", peer.rank, " published offset ", theirs[0], " for ", bytes,
          " bytes of its ", data_.size(), "-byte region in call ", call,
          ": misaligned or outside the region, a forged or corrupted word"));
    }
    peer.offset = static_cast<size_t>(theirs[0]);
  }
  return absl::OkStatus();
}

absl::Status HostAllReduce::OneShotCall(uint64_t call, size_t offset, size_t bytes,
                                        size_t count, DataType type, ReduceOp op, int root,
                                        std::byte* result) {
  // Member order, the same on every member: identical results everywhere.
  // A reduce to a root: only the root reads; the others wait for it to be
  // done with their buffers.
  if (root >= 0 && root != position_) return Leave(call);
  std::vector<const std::byte*> sources;
  for (int p = 0; p < size(); ++p) {
    if (p == position_) {
      sources.push_back(Own(offset));
      continue;
    }
    ASSIGN_OR_RETURN(const std::byte* theirs,
                     PeerBytes(peers_[p], 0, bytes, SlotOf(p), bytes));
    sources.push_back(theirs);
  }
  RETURN_IF_ERROR(mover_->Reduce(type, op, scratch_, sources, count));
  // Our reads of the peers' buffers have landed before we say done.
  RETURN_IF_ERROR(mover_->Fence(Deadline(), "the one-shot reduction"));
  stats_.reads += size() - 1;
  stats_.bytes_read += static_cast<int64_t>(bytes) * (size() - 1);
  ++stats_.one_shot_calls;
  RETURN_IF_ERROR(Leave(call));
  RETURN_IF_ERROR(mover_->Copy(result != nullptr ? result : Own(offset), scratch_, bytes));
  return mover_->Fence(Deadline(), "the copy of the one-shot result");
}

absl::Status HostAllReduce::ScatterGatherCall(uint64_t call, size_t offset, size_t count,
                                              DataType type, ReduceOp op, int root,
                                              std::byte* result) {
  const size_t element = ElementSize(type);
  const size_t n = static_cast<size_t>(size());
  const size_t chunk = options_.chunk_bytes / element;  // elements, >= 8
  auto chunks_of = [&](size_t length) { return (length + chunk - 1) / chunk; };
  std::byte* ours = Own(offset);
  // Where the result goes: our range, or the caller's buffer (then only
  // our own segment, which the peers copy from our range, is written in
  // both).
  std::byte* out = result != nullptr ? result : ours;

  // Reduce-scatter: our segment of every peer, chunk by chunk, into ours;
  // each chunk is published for the peers to copy as soon as it is final
  // (its mark reached: at once on the host; on a device, all chunks are
  // enqueued first and published as the device gets through them).
  const Range mine = SegmentOf(count, n, static_cast<size_t>(position_));
  const size_t my_chunks = chunks_of(mine.length);
  std::vector<uint64_t> marks;
  size_t published = 0;
  auto publish = [&]() -> absl::Status {
    size_t final_chunks = published;
    while (final_chunks < marks.size()) {
      ASSIGN_OR_RETURN(const bool reached, mover_->Reached(marks[final_chunks]));
      if (!reached) break;
      ++final_chunks;
    }
    if (final_chunks > published) {
      published = final_chunks;
      Store(block_ + layout::kReduced, reduced_ + published);
      RingPeers();
    }
    return absl::OkStatus();
  };
  for (size_t c = 0; c < my_chunks; ++c) {
    const size_t first = mine.begin + c * chunk;
    const size_t length = std::min(chunk, mine.begin + mine.length - first);
    std::vector<const std::byte*> sources = {ours + first * element};
    for (int p = 0; p < size(); ++p) {
      if (p == position_) continue;
      ASSIGN_OR_RETURN(const std::byte* theirs,
                       PeerBytes(peers_[p], first * element, length * element, SlotOf(p),
                                 (mine.begin + mine.length) * element));
      sources.push_back(theirs);
      ++stats_.reads;
      stats_.bytes_read += static_cast<int64_t>(length * element);
    }
    RETURN_IF_ERROR(mover_->Reduce(type, op, ours + first * element, sources, length));
    // The chunk is final in our buffer before a peer is told to copy it.
    ASSIGN_OR_RETURN(const uint64_t mark, mover_->Mark());
    marks.push_back(mark);
    RETURN_IF_ERROR(publish());
    if (result != nullptr) {
      RETURN_IF_ERROR(
          mover_->Copy(result + first * element, ours + first * element, length * element));
    }
  }
  // Our last chunks may still be on the device: the peers wait for them.
  // (On the host every chunk is published already.)
  if (published < my_chunks) {
    RETURN_IF_ERROR(PollUntil(
        [&]() -> absl::StatusOr<bool> {
          RETURN_IF_ERROR(publish());
          return published == my_chunks;
        },
        Deadline(),
        absl::StrCat("the reduce-scatter of call ", call, " on ", mover_->Describe())));
  }
  reduced_ += my_chunks;

  // How many chunks of its segment peer `p` has made final in this call;
  // its counter is untrusted.
  auto final_chunks = [&](size_t p) -> absl::StatusOr<size_t> {
    const Peer& peer = peers_[p];
    RETURN_IF_ERROR(CheckNotAborted(peer, Load(peer.control + layout::kDone)));
    const size_t total = chunks_of(SegmentOf(count, n, p).length);
    const uint64_t published = Load(peer.control + layout::kReduced);
    if (published < peer.reduced_base || published - peer.reduced_base > total) {
      return absl::DataLossError(absl::StrCat(
          "rank ", peer.rank, " wrote ", published, " into its reduced-chunks counter, "
          "outside [", peer.reduced_base, ", ", peer.reduced_base + total, "] for call ",
          call, ": a forged or corrupted word"));
    }
    return static_cast<size_t>(published - peer.reduced_base);
  };

  // All-gather (a reduce: to the root only): copy each peer's final chunks
  // of its segment, taking whichever peer has one ready rather than
  // waiting on one.
  std::vector<size_t> copied(n, 0);
  size_t left = 0;
  for (size_t p = 0; p < n; ++p) {
    if (static_cast<int>(p) != position_) left += chunks_of(SegmentOf(count, n, p).length);
  }
  if (root >= 0 && root != position_) left = 0;
  while (left > 0) {
    bool moved = false;
    for (size_t step = 1; step < n; ++step) {
      const size_t p = (static_cast<size_t>(position_) + step) % n;
      Peer& peer = peers_[p];
      const Range theirs = SegmentOf(count, n, p);
      const size_t total = chunks_of(theirs.length);
      if (copied[p] == total) continue;
      ASSIGN_OR_RETURN(const size_t ready, final_chunks(p));
      if (copied[p] < ready) {
        // Every chunk final so far in one copy (one system call when it
        // lies in the peer's process).
        const size_t first = theirs.begin + copied[p] * chunk;
        const size_t length = std::min(ready * chunk, theirs.length) - copied[p] * chunk;
        RETURN_IF_ERROR(
            CopyFromPeer(peer, first * element, length * element, out + first * element));
        ++stats_.reads;
        stats_.bytes_read += static_cast<int64_t>(length * element);
        left -= ready - copied[p];
        copied[p] = ready;
        moved = true;
      }
    }
    if (left > 0 && !moved) {
      // Wait for any peer with chunks left to publish one more.
      RETURN_IF_ERROR(WaitFor(call, "reduced chunks", /*any=*/true,
                              [&](Peer& peer) -> absl::StatusOr<bool> {
        const size_t p = static_cast<size_t>(&peer - peers_.data());
        if (copied[p] == chunks_of(SegmentOf(count, n, p).length)) return false;
        ASSIGN_OR_RETURN(const size_t ready, final_chunks(p));
        return ready > copied[p];
      }));
    }
  }
  // Every copy out of the peers' buffers (and into the result) has landed
  // before we say done.
  RETURN_IF_ERROR(mover_->Fence(Deadline(), "the all-gather's copies"));
  // Their counters move on by what this call made final.
  for (size_t p = 0; p < n; ++p) {
    if (static_cast<int>(p) != position_) {
      peers_[p].reduced_base += chunks_of(SegmentOf(count, n, p).length);
    }
  }
  return Leave(call);
}

absl::Status HostAllReduce::Leave(uint64_t call) {
  // Our reads of the peers' buffers come before the loads of their done
  // words below (a seqlock reader's fence): a peer seen not to have given
  // up had not changed its buffer while we read it.
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  Store(block_ + layout::kDone, call);
  RingPeers();
  return WaitFor(call, "done flag", /*any=*/false, [&](Peer& peer) -> absl::StatusOr<bool> {
    const uint64_t done = Load(peer.control + layout::kDone);
    RETURN_IF_ERROR(CheckNotAborted(peer, done));
    if (done > call) {
      return absl::DataLossError(absl::StrCat(
          "rank ", peer.rank, " wrote done flag ", done, " into its control block during call ",
          call, ": a forged or corrupted word"));
    }
    return done == call;
  });
}

absl::Status HostAllReduce::Shutdown(std::optional<absl::Duration> timeout) {
  const absl::Duration limit = timeout.value_or(options_.timeout);
  const std::string name = absl::StrCat("host/", options_.name, "/shutdown");
  absl::Status barrier =
      options_.loop != nullptr
          ? onesided::Barrier(*options_.loop, links_.store(), links_.ns(), name, size(), limit)
          : rdma::Barrier(links_.store(), links_.ns(), name, size(), limit);
  if (!barrier.ok()) return Annotate(barrier, Where());
  quiesced_ = true;  // no peer reads our memory any more
  return absl::OkStatus();
}

}  // namespace rdmaflow::collectives
