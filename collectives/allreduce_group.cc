// File: allreduce_group.cc
#include "collectives/allreduce_group.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collectives/members.h"
#include "common/status_macros.h"

namespace rdmaflow::collectives {

std::string AlgorithmName(AllReduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllReduceAlgorithm::kNone: return "none";
    case AllReduceAlgorithm::kRing: return "ring";
    case AllReduceAlgorithm::kHostOneShot: return "host-one-shot";
    case AllReduceAlgorithm::kHostScatterGather: return "host-scatter-gather";
    case AllReduceAlgorithm::kHierarchical: return "hierarchical";
  }
  return "?";
}

absl::StatusOr<DirectAccess> ParseDirectAccess(absl::string_view text) {
  if (text == "auto") return DirectAccess::kAuto;
  if (text == "off") return DirectAccess::kOff;
  return absl::InvalidArgumentError(
      absl::StrCat("direct access '", text, "': expected 'auto' or 'off'"));
}

absl::StatusOr<Hierarchy> ParseHierarchy(absl::string_view text) {
  if (text == "auto") return Hierarchy::kAuto;
  if (text == "off") return Hierarchy::kOff;
  return absl::InvalidArgumentError(
      absl::StrCat("hierarchy '", text, "': expected 'auto' or 'off'"));
}

namespace {

// What a member that could not set up publishes in place of its settings.
constexpr char kFailedPrefix[] = "failed: ";

std::string SettingsKey(const std::string& ns, const std::string& name, int member) {
  return absl::StrCat(ns, "/group/", name, "/", member, "/settings");
}

HostAllReduceOptions HostOptions(const std::string& name, const RingAllReduceOptions& ring,
                                 const AllReduceGroupOptions& options, DataMover* mover) {
  const bool device = mover != nullptr;
  HostAllReduceOptions host;
  host.name = name;
  host.one_shot_max_bytes =
      std::min(device ? options.device_one_shot_max_bytes : options.one_shot_max_bytes,
               ring.capacity_bytes);
  host.chunk_bytes = device ? options.device_chunk_bytes : options.host_chunk_bytes;
  host.timeout = ring.timeout;
  host.loop = ring.loop;
  host.mover = mover;
  host.external_reads = options.external_reads && !device;
  return host;
}

}  // namespace

absl::StatusOr<std::unique_ptr<AllReduceGroup>> AllReduceGroup::Create(
    rdma::Transport& transport, rdma::Store& store, const std::string& ns,
    std::vector<int> members, const AllReduceGroupOptions& options) {
  const std::string what = absl::StrCat("all-reduce '", options.ring.name, "'");
  // One loop for every algorithm, on this thread, as the ring would make.
  onesided::ProgressLoopOptions loop;
  loop.name = absl::StrCat(what, " on rank ", transport.rank());
  loop.wait = options.ring.wait;
  loop.liveness_interval = options.ring.liveness_interval;
  ASSIGN_OR_RETURN(onesided::OwnLinks own,
                   onesided::MakeOwnLinks(transport, store, ns, options.ring.loop, loop,
                                          options.ring.timeout, what));
  AllReduceGroupOptions on_links = options;
  on_links.ring.loop = &own.links->loop();
  ASSIGN_OR_RETURN(std::unique_ptr<AllReduceGroup> group,
                   Create(*own.links, std::move(members), on_links));
  group->own_ = std::move(own);
  return group;
}

absl::StatusOr<std::unique_ptr<AllReduceGroup>> AllReduceGroup::Create(
    onesided::PeerLinks& links, std::vector<int> members, const AllReduceGroupOptions& options) {
  rdma::Transport& transport = links.transport();
  rdma::Store& store = links.store();
  const std::string& ns = links.ns();
  std::unique_ptr<AllReduceGroup> group(new AllReduceGroup());
  RingAllReduceOptions ring = options.ring;
  const std::string what = absl::StrCat("all-reduce '", ring.name, "'");
  ASSIGN_OR_RETURN(group->position_, PositionOf(members, transport.rank(), what));
  group->members_ = members;
  if (ring.capacity_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": needs capacity_bytes > 0"));
  }
  if (ring.loop != nullptr && ring.loop != &links.loop()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": options.ring.loop is not the loop of its links"));
  }
  ring.loop = &links.loop();
  group->ring_options_timeout_ = ring.timeout;
  if (options.device == nullptr) {
    ASSIGN_OR_RETURN(rdma::MemoryRegion data, transport.Allocate(ring.capacity_bytes));
    group->data_ = std::make_shared<rdma::MemoryRegion>(std::move(data));
    ring.data = group->data_;
  } else {
    absl::Status set_up = group->SetUpDevice(transport, options, what);
    if (!set_up.ok()) {
      // The others fail at once, quoting why, rather than wait for us.
      if (members.size() > 1) {
        store.Set(SettingsKey(ns, ring.name, transport.rank()),
                  absl::StrCat(kFailedPrefix, set_up.message()))
            .IgnoreError();
      }
      return set_up;
    }
    ring.data = group->stage_;
  }

  if (members.size() > 1) {
    RETURN_IF_ERROR(group->AgreeOnSettings(store, ns, ring.name, transport.rank(), options,
                                           ring.timeout));
  }
  const bool direct = options.direct == DirectAccess::kAuto && members.size() > 1;
  HostGroups hosts;
  hosts.hosts = {members};
  if (direct) {
    std::string identity = options.host;
    if (identity.empty()) {
      ASSIGN_OR_RETURN(identity, LocalHostIdentity());
    }
    ASSIGN_OR_RETURN(hosts, GroupByHost(store, ns, ring.name, members, transport.rank(),
                                        identity, ring.timeout));
  }
  group->hosts_ = static_cast<int>(hosts.hosts.size());
  const bool shared_host = std::any_of(hosts.hosts.begin(), hosts.hosts.end(),
                                       [](const auto& host) { return host.size() > 1; });
  if (direct && group->hosts_ > 1 && shared_host && options.hierarchy == Hierarchy::kAuto) {
    ASSIGN_OR_RETURN(group->hierarchical_,
                     group->TryHierarchy(links, hosts, ring, options));
    if (group->hierarchical_) {
      if (group->leaders_ != nullptr) group->PinStage();
      return group;
    }
  }
  ASSIGN_OR_RETURN(group->ring_,
                   RingAllReduce::Create(links, members, ring));
  if (direct && group->hosts_ == 1) {
    // The group's region: its descriptor is already published for the
    // ring, and both algorithms reduce it in place.
    absl::StatusOr<std::unique_ptr<HostAllReduce>> made = HostAllReduce::Create(
        links, std::move(members), *group->data_,
        HostOptions(ring.name, ring, options, group->mover_.get()));
    if (made.ok()) {
      group->host_ = *std::move(made);
    } else if (!absl::IsUnimplemented(made.status())) {
      return made.status();
    }
  }
  if (group->host_ == nullptr) group->PinStage();
  return group;
}

absl::Status AllReduceGroup::SetUpDevice(rdma::Transport& transport,
                                         const AllReduceGroupOptions& options,
                                         const std::string& what) {
  rdma::device_path::DeviceTransport& device = *options.device;
  if (static_cast<rdma::Transport*>(&device) != &transport) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": options.device must be the transport the group is created on"));
  }
  const size_t capacity = options.ring.capacity_bytes;
  ASSIGN_OR_RETURN(rdma::MemoryRegion data, device.AllocateDevice(capacity));
  data_ = std::make_shared<rdma::MemoryRegion>(std::move(data));
  ASSIGN_OR_RETURN(mover_, DeviceDataMover::Create(device));
  // Every ring member publishes the stage; PinStage pins it where a ring
  // will run.
  ASSIGN_OR_RETURN(rdma::MemoryRegion stage, transport.Allocate(capacity));
  stage_ = std::make_shared<rdma::MemoryRegion>(std::move(stage));
  runtime_ = &device.runtime();
  return absl::OkStatus();
}

void AllReduceGroup::PinStage() {
  if (stage_ == nullptr) return;  // host memory
  // Only faster copies ride on it, and the other members have set up by
  // now: a refusal is said, not fatal.
  absl::Status pinned = runtime_->PinHost(stage_->data(), stage_->size());
  if (!pinned.ok()) {
    std::fprintf(stderr,
                 "rdmaflow: all-reduce on rank %d: its %zu-byte host stage stays unpinned "
                 "(%s): its copies to and from the device run slower\n",
                 rank(), stage_->size(), pinned.ToString().c_str());
    return;
  }
  stage_pinned_ = true;
}

namespace {

// A value read from the store, for a message: untrusted, so bounded.
std::string Quoted(const std::string& value) {
  return value.size() <= 300 ? value : value.substr(0, 300) + "...";
}

}  // namespace

absl::Status AllReduceGroup::AgreeOnSettings(rdma::Store& store, const std::string& ns,
                                             const std::string& name, int rank,
                                             const AllReduceGroupOptions& options,
                                             absl::Duration timeout) {
  const std::string ours = absl::StrCat(
      "direct=", options.direct == DirectAccess::kAuto ? "auto" : "off",
      " hierarchy=", options.hierarchy == Hierarchy::kAuto ? "auto" : "off",
      " memory=", options.device == nullptr ? "host" : "device");
  RETURN_IF_ERROR(store.Set(SettingsKey(ns, name, rank), ours));
  for (int member : members_) {
    if (member == rank) continue;
    ASSIGN_OR_RETURN(std::string theirs, store.Get(SettingsKey(ns, name, member), timeout));
    if (absl::StartsWith(theirs, kFailedPrefix)) {
      return absl::AbortedError(absl::StrCat("all-reduce '", name, "' on rank ", rank,
                                             ": rank ", member, " could not set it up: ",
                                             Quoted(theirs.substr(strlen(kFailedPrefix)))));
    }
    if (theirs != ours) {
      return absl::FailedPreconditionError(absl::StrCat(
          "all-reduce '", name, "': rank ", member, " created it with ", Quoted(theirs),
          ", rank ", rank, " with ", ours, "; every member must pass the same options"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> AllReduceGroup::TryHierarchy(onesided::PeerLinks& links,
                                                  const HostGroups& hosts,
                                                  const RingAllReduceOptions& ring,
                                                  const AllReduceGroupOptions& options) {
  rdma::Store& store = links.store();
  const std::string& ns = links.ns();
  const std::vector<int>& local = hosts.hosts[hosts.mine];
  const int rank = links.rank();
  local_leader_ = local.front();
  auto key = [&](int member, const char* what) {
    return absl::StrCat(ns, "/group/", ring.name, "/", member, "/", what);
  };
  // Every member answers "ok", "no: <why>" (its host's members cannot map
  // each other's memory: one flat ring for all) or "failed: <error>" (the
  // group fails on every member), and reads every answer, so all reach
  // the same verdict. Each host's collective has a name of its own (their
  // barriers must not meet): its leader's rank.
  std::string answer = "ok";
  if (local.size() > 1) {
    HostAllReduceOptions host = HostOptions(absl::StrCat(ring.name, "-host", local.front()),
                                            ring, options, mover_.get());
    host.external_reads = false;  // the hierarchy's calls stay in the region
    absl::StatusOr<std::unique_ptr<HostAllReduce>> made =
        HostAllReduce::Create(links, local, *data_, host);
    if (made.ok()) {
      local_ = *std::move(made);
    } else if (absl::IsUnimplemented(made.status())) {
      answer = absl::StrCat("no: ", made.status().message());
    } else {
      store.Set(key(rank, "hierarchy"), absl::StrCat("failed: ", made.status().message()))
          .IgnoreError();
      return made.status();
    }
  }
  RETURN_IF_ERROR(store.Set(key(rank, "hierarchy"), answer));
  std::string refusal = answer == "ok" ? "" : answer.substr(4);
  for (int member : members_) {
    if (member == rank) continue;
    ASSIGN_OR_RETURN(std::string theirs, store.Get(key(member, "hierarchy"), ring.timeout));
    if (theirs == "ok") continue;
    if (absl::StartsWith(theirs, "no: ")) {
      if (refusal.empty()) refusal = theirs.substr(4);
      continue;
    }
    return absl::AbortedError(absl::StrCat(
        "all-reduce '", ring.name, "' on rank ", rank, ": rank ", member,
        " could not set up its host's collective: ", Quoted(theirs)));
  }
  if (!refusal.empty()) {
    if (local_ != nullptr) {
      // Our host's members all reach this verdict and meet here.
      RETURN_IF_ERROR(local_->Shutdown());
      local_.reset();
    }
    std::fprintf(stderr,
                 "rdmaflow: all-reduce '%s' on rank %d: members on %d hosts, but not "
                 "hierarchical (%s): one flat ring\n",
                 ring.name.c_str(), rank, static_cast<int>(hosts.hosts.size()),
                 Quoted(refusal).c_str());
    return false;
  }
  if (rank == local.front()) {
    // The leaders' ring; our host's members wait for its outcome.
    std::vector<int> leaders;
    for (const std::vector<int>& host : hosts.hosts) leaders.push_back(host.front());
    RingAllReduceOptions across = ring;
    across.name = absl::StrCat(ring.name, "-leaders");
    absl::StatusOr<std::unique_ptr<RingAllReduce>> made =
        RingAllReduce::Create(links, leaders, across);
    RETURN_IF_ERROR(store.Set(key(rank, "leader"),
                              made.ok() ? std::string("ok")
                                        : absl::StrCat("failed: ", made.status().message())));
    if (!made.ok()) return made.status();
    leaders_ = *std::move(made);
  } else {
    // The leader's ring meets the other hosts' leaders, each of whom may
    // take up to the timeout to arrive: wait for both.
    ASSIGN_OR_RETURN(std::string leader,
                     store.Get(key(local.front(), "leader"), 2 * ring.timeout));
    if (leader != "ok") {
      return absl::AbortedError(absl::StrCat(
          "all-reduce '", ring.name, "' on rank ", rank, ": this host's leader, rank ",
          local.front(), ", could not join the ring across hosts: ", Quoted(leader)));
    }
  }
  return true;
}

AllReduceGroup::~AllReduceGroup() {
  // The host collectives' peers read the region until their shutdown
  // barrier; the rings keep it alive, past their destruction, while a
  // neighbour may still write into it.
  const bool peers_may_read = (host_ != nullptr && !host_->quiesced()) ||
                              (local_ != nullptr && !local_->quiesced());
  host_.reset();
  local_.reset();
  ring_.reset();
  leaders_.reset();
  mover_.reset();  // waits, bounded, for its stream
  if (stage_copy_unfenced_) {
    // A copy between the device and the stage was never seen to finish:
    // the device may still write either end, so both stay allocated (the
    // stage pinned and mapped).
    std::fprintf(stderr,
                 "rdmaflow: all-reduce on rank %d: leaving its %zu-byte host stage "
                 "and its data region allocated: a copy between them was never seen "
                 "to finish\n",
                 rank(), stage_->size());
    new std::shared_ptr<rdma::MemoryRegion>(std::move(stage_));  // deliberately leaked
    new std::shared_ptr<rdma::MemoryRegion>(std::move(data_));   // deliberately leaked
  } else if (stage_pinned_) {
    // The stage stays mapped while a ring's neighbour may write into it
    // (the ring holds it); only the pinning ends.
    absl::Status unpinned = runtime_->UnpinHost(stage_->data());
    if (!unpinned.ok()) {
      std::fprintf(stderr, "rdmaflow: all-reduce on rank %d: %s\n", rank(),
                   unpinned.ToString().c_str());
    }
  }
  if (peers_may_read && data_ != nullptr) {
    std::fprintf(stderr,
                 "rdmaflow: all-reduce on rank %d: leaving its %zu-byte data region "
                 "mapped: no Shutdown() barrier passed, so a peer on its host may still "
                 "read it\n",
                 rank(), data_->size());
    // Deliberately leaked: the region outlives the group.
    new std::shared_ptr<rdma::MemoryRegion>(std::move(data_));
  }
}

AllReduceAlgorithm AllReduceGroup::Choose(size_t bytes) const {
  if (hierarchical_) return AllReduceAlgorithm::kHierarchical;
  if (host_ == nullptr) return AllReduceAlgorithm::kRing;
  return host_->OneShot(bytes) ? AllReduceAlgorithm::kHostOneShot
                               : AllReduceAlgorithm::kHostScatterGather;
}

absl::Status AllReduceGroup::AllReduce(size_t offset, size_t count, DataType type,
                                       ReduceOp op, uint8_t variant, std::byte* result) {
  // A count too large to multiply is refused by the algorithm itself.
  const size_t element = ElementSize(type);
  const size_t bytes = count <= capacity() / element ? count * element : capacity() + 1;
  if (result == data() + offset) result = nullptr;  // the range itself: in place
  // What the device cannot reduce is refused on every member alike, before
  // any waits for another (the rings would reduce it on the host, the
  // device paths not).
  if (mover_ != nullptr) RETURN_IF_ERROR(mover_->Supports(type, op));
  last_ = Choose(bytes);
  absl::Status status;
  switch (last_) {
    case AllReduceAlgorithm::kHierarchical:
      status = HierarchicalAllReduce(offset, count, type, op, variant);
      break;
    case AllReduceAlgorithm::kRing:
      status = RingAllReduceOf(*ring_, offset, count, type, op, variant);
      break;
    default:
      return host_->AllReduce(offset, count, type, op, variant, result);
  }
  if (status.ok() && result != nullptr && bytes > 0) {
    status = CopyResult(result, offset, bytes);
  }
  return status;
}

absl::Status AllReduceGroup::Broadcast(size_t offset, size_t bytes, int root,
                                      uint8_t variant) {
  if (host_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "broadcast on rank ", rank(), ": a copy out of the root's region needs every member "
        "on one host with direct access (", external_refusal(), ")"));
  }
  return host_->Broadcast(offset, bytes, root, variant);
}

std::string AllReduceGroup::external_refusal() const {
  if (host_ != nullptr) return host_->external_refusal();
  return hosts_ > 1 ? "the members are on several hosts"
                    : "the members have no direct access to each other's memory";
}

absl::Status AllReduceGroup::AllReduceExternal(std::byte* buffer, size_t count, DataType type,
                                               ReduceOp op, uint8_t variant) {
  if (host_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "all-reduce on rank ", rank(), ": a buffer outside the data region needs every member "
        "on one host with direct access (", external_refusal(), ")"));
  }
  const size_t element = ElementSize(type);
  last_ = Choose(count <= SIZE_MAX / element ? count * element : SIZE_MAX);
  return host_->AllReduceExternal(buffer, count, type, op, variant);
}

absl::Status AllReduceGroup::CheckRange(size_t offset, size_t count, DataType type,
                                        const char* what) const {
  const size_t element = ElementSize(type);
  if (offset % element != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " on rank ", rank(), ": offset ", offset, " is not aligned to ",
        DataTypeName(type), " elements"));
  }
  if (offset > capacity() || count > (capacity() - offset) / element) {
    return absl::OutOfRangeError(absl::StrCat(
        what, " on rank ", rank(), ": ", count, " ", DataTypeName(type),
        " elements at offset ", offset, " exceed its data region of ", capacity(), " bytes"));
  }
  return absl::OkStatus();
}

absl::Status AllReduceGroup::RingAllReduceOf(RingAllReduce& ring, size_t offset,
                                             size_t count, DataType type, ReduceOp op,
                                             uint8_t variant) {
  if (mover_ == nullptr) return ring.AllReduce(offset, count, type, op, variant);
  // Refused before a copy could leave the region; on this member only
  // (each has an offset of its own), so the ring gives the call up.
  if (absl::Status range = CheckRange(offset, count, type, "ring all-reduce of device memory");
      !range.ok()) {
    return ring.Abandon(range);
  }
  const size_t bytes = count * ElementSize(type);
  std::byte* host = stage_->data() + offset;
  // Until a fence passes, the device may still read or write the stage.
  stage_copy_unfenced_ = true;
  // A copy that fails keeps us out of the ring's call the others are in:
  // give it up, so they do not wait for us nor pair it with our next.
  absl::Status staged = mover_->Copy(host, data() + offset, bytes);
  if (staged.ok()) {
    staged = mover_->Fence(absl::Now() + ring_options_timeout_,
                           absl::StrCat("copying ", bytes, " bytes of rank ", rank(),
                                        "'s device memory to host memory for the ring"));
  }
  if (!staged.ok()) return ring.Abandon(staged);
  stage_copy_unfenced_ = false;
  RETURN_IF_ERROR(ring.AllReduce(offset, count, type, op, variant));
  stage_copy_unfenced_ = true;
  RETURN_IF_ERROR(mover_->Copy(data() + offset, host, bytes));
  RETURN_IF_ERROR(mover_->Fence(absl::Now() + ring_options_timeout_,
                                absl::StrCat("copying the ring's result of ", bytes,
                                             " bytes back to rank ", rank(),
                                             "'s device memory")));
  stage_copy_unfenced_ = false;
  return absl::OkStatus();
}

absl::Status AllReduceGroup::CopyResult(std::byte* result, size_t offset, size_t bytes) {
  const std::byte* range = data() + offset;
  if (mover_ == nullptr) {
    std::memmove(result, range, bytes);  // a result in the region may overlap
    return absl::OkStatus();
  }
  const auto at = reinterpret_cast<uintptr_t>(result);
  const auto from = reinterpret_cast<uintptr_t>(range);
  if (at < from + bytes && from < at + bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "all-reduce on rank ", rank(), ": a device result must not overlap the range it "
        "comes from (its ", bytes, " bytes at offset ", offset, " of the data region)"));
  }
  RETURN_IF_ERROR(mover_->Copy(result, range, bytes));
  return mover_->Fence(absl::Now() + ring_options_timeout_,
                       absl::StrCat("copying rank ", rank(), "'s result of ", bytes,
                                    " bytes out of the data region"));
}

absl::Status AllReduceGroup::HierarchicalAllReduce(size_t offset, size_t count,
                                                   DataType type, ReduceOp op,
                                                   uint8_t variant) {
  // A bad range is bad on this member only (each has an offset of its
  // own): the host's reduce tells its members, and a leader gives the
  // leaders' call up, so no member waits for us.
  if (absl::Status range = CheckRange(offset, count, type, "hierarchical all-reduce");
      !range.ok() && local_ == nullptr) {
    return leaders_ != nullptr ? leaders_->Abandon(range) : range;
  }
  const size_t element = ElementSize(type);
  // 1. Our host's sum, at its leader (position 0 of the host).
  if (local_ != nullptr) {
    absl::Status reduced = local_->Reduce(offset, count, type, op, 0, variant);
    if (!reduced.ok()) {
      // The leader's host has no sum for the leaders' call: give it up.
      if (leaders_ != nullptr) leaders_->Abandon(reduced).IgnoreError();
      return reduced;
    }
  }
  // 2. The leaders' all-reduce across hosts.
  if (leaders_ != nullptr) {
    absl::Status across = RingAllReduceOf(*leaders_, offset, count, type, op, variant);
    if (!across.ok()) {
      // Our host's members wait for the broadcast: fail it at once.
      if (local_ != nullptr) local_->Abandon(across);
      return across;
    }
  }
  // 3. The result, from the leader to the host's members.
  if (local_ == nullptr) return absl::OkStatus();
  absl::Status broadcast = local_->Broadcast(offset, count * element, 0);
  if (absl::IsDeadlineExceeded(broadcast) && leaders_ == nullptr) {
    // The leader waited for us in the reduce; since then it has been in
    // the all-reduce across hosts.
    return absl::DeadlineExceededError(absl::StrCat(
        broadcast.message(), "; this host's leader, rank ", local_leader_,
        ", was in the all-reduce across hosts since: a slow or stalled host holds it there"));
  }
  return broadcast;
}

absl::Status AllReduceGroup::Abandon(absl::Status why) {
  for (RingAllReduce* ring : {ring_.get(), leaders_.get()}) {
    if (ring != nullptr) ring->Abandon(why).IgnoreError();
  }
  for (HostAllReduce* host : {host_.get(), local_.get()}) {
    if (host != nullptr) host->Abandon(why);
  }
  return why;
}

RingAllReduceStats AllReduceGroup::stats() const {
  RingAllReduceStats stats;
  for (const RingAllReduce* ring : {ring_.get(), leaders_.get()}) {
    if (ring == nullptr) continue;
    stats.calls += ring->stats().calls;
    stats.messages += ring->stats().messages;
    stats.bytes_sent += ring->stats().bytes_sent;
  }
  for (const HostAllReduce* host : {host_.get(), local_.get()}) {
    if (host == nullptr) continue;
    stats.calls += host->stats().calls;
    stats.messages += host->stats().reads;
    stats.bytes_sent += host->stats().bytes_read;
  }
  return stats;
}

absl::Status AllReduceGroup::Shutdown(std::optional<absl::Duration> timeout) {
  // One bound for every barrier.
  const absl::Time deadline = absl::Now() + timeout.value_or(ring_options_timeout_);
  auto left = [&] { return std::max(deadline - absl::Now(), absl::ZeroDuration()); };
  absl::Status status;
  for (HostAllReduce* host : {host_.get(), local_.get()}) {
    if (host != nullptr) status.Update(host->Shutdown(left()));
  }
  for (RingAllReduce* ring : {ring_.get(), leaders_.get()}) {
    if (ring != nullptr) status.Update(ring->Shutdown(left()));
  }
  return status;
}

}  // namespace rdmaflow::collectives
