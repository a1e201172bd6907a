// File: allreduce_group.h
// -----------------------------------------------------------------------------
// AllReduceGroup: the all-reduce the strategies, the c10d backend and the
// benches call. It owns one data region and picks, per call, the fastest
// algorithm the members can all run on it:
//
//   host one-shot         every member on one host with direct access to the
//                         others' memory (HostAllReduce), small calls;
//   host scatter-gather   the same members, larger calls;
//   hierarchical          members on several hosts, some sharing one, with
//                         direct access within each host: a reduce to each
//                         host's leader over shared memory, a ring among
//                         the leaders across hosts, a broadcast from each
//                         leader over shared memory. Only one rank per host
//                         sends across the network, and every byte crosses
//                         it once per direction instead of once per member;
//   ring                  anything else (verbs, TCP, one rank per host):
//                         RingAllReduce's one-sided writes.
//
// On device memory (options.device, a DeviceTransport: docs/device.md) the
// data region is device memory; the same-host paths reduce it in place on
// the device (HostAllReduce with a DeviceDataMover: peers' regions mapped
// by IPC), and the rings, flat or among the hosts' leaders, run on a pinned
// host copy of the called range (a device-to-host copy before, host-to-
// device after; the ring's reduction runs on the host).
//
// Hosts come from the members' host identities (collectives/host_groups.h)
// and direct access is a capability of the transport (Endpoint::MapRemote);
// both are found at Create() and agreed by all members through the store,
// so every member takes the same path for the same call. Every algorithm
// reduces the same region in place, so callers lay their tensors there once.
//
//   AllReduceGroupOptions options;
//   options.ring.capacity_bytes = 64 << 20;
//   ASSIGN_OR_RETURN(auto group, AllReduceGroup::Create(
//       transport, store, "job", {0, 1, 2, 3}, options));
//   std::memcpy(group->data(), grads, bytes);
//   RETURN_IF_ERROR(group->AllReduce(0, bytes / 4, DataType::kFloat32));
//   // group->last_algorithm(): which one ran
//   RETURN_IF_ERROR(group->Shutdown());
#ifndef RDMAFLOW_COLLECTIVES_ALLREDUCE_GROUP_H_
#define RDMAFLOW_COLLECTIVES_ALLREDUCE_GROUP_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "collectives/device_data_mover.h"
#include "collectives/host_allreduce.h"
#include "collectives/host_groups.h"
#include "collectives/reduce.h"
#include "collectives/ring_allreduce.h"
#include "device/device_runtime.h"
#include "onesided/progress/progress_loop.h"
#include "rdma/device/device_transport.h"
#include "rdma/store.h"
#include "rdma/transport.h"

namespace rdmaflow::collectives {

enum class AllReduceAlgorithm {
  kNone,
  kRing,
  kHostOneShot,
  kHostScatterGather,
  kHierarchical,
};

// "ring", "host-one-shot", "host-scatter-gather", "hierarchical" ("none"
// before a call).
std::string AlgorithmName(AllReduceAlgorithm algorithm);

// When the group uses direct access among same-host members.
enum class DirectAccess {
  kAuto,  // wherever every member maps every other's memory
  kOff,   // never: the ring only (ablations, benches)
};

// "auto" or "off"; kInvalidArgument otherwise.
absl::StatusOr<DirectAccess> ParseDirectAccess(absl::string_view text);

// Whether members on several hosts reduce hierarchically.
enum class Hierarchy {
  kAuto,  // wherever some host has two members and each host's members
          // have direct access to each other
  kOff,   // never: one flat ring over every member (ablations, benches)
};

// "auto" or "off"; kInvalidArgument otherwise.
absl::StatusOr<Hierarchy> ParseHierarchy(absl::string_view text);

struct AllReduceGroupOptions {
  // The ring's options, and with them the group's: name, capacity_bytes,
  // timeout, wait, liveness_interval, loop (null: the group makes one).
  RingAllReduceOptions ring;
  DirectAccess direct = DirectAccess::kAuto;
  // Direct access: calls up to this many bytes take the one-shot path.
  size_t one_shot_max_bytes = size_t{64} << 10;
  // Direct access: the reduce-scatter's unit of progress.
  size_t host_chunk_bytes = size_t{64} << 10;
  // Host memory, every member on one host: whether a member may pass a
  // buffer of its own ordinary memory (AllReduceExternal), read by the
  // peers with process_vm_readv; probed and agreed at Create() (one member
  // with it off keeps them all off).
  bool external_reads = true;
  // Members on several hosts (needs direct access: off with `direct` off).
  Hierarchy hierarchy = Hierarchy::kAuto;
  // This rank's host identity; empty: LocalHostIdentity() (RDMAFLOW_HOST,
  // or host name, boot id and PID namespace).
  std::string host;
  // Device memory: the DeviceTransport passed to Create() (the same
  // object: kInvalidArgument otherwise), whose runtime holds the data
  // region. Null: host memory. Every member must agree.
  rdma::device_path::DeviceTransport* device = nullptr;
  // Device memory, same-host paths: the one-shot limit and the
  // scatter-gather's unit (one device event and one host round trip per
  // chunk: keep it large; on an H200, 2 ranks of 256 MiB, 16 MiB chunks
  // kept 0.60 of the copy bound, 64 MiB 0.73, docs/device.md), in place
  // of one_shot_max_bytes and host_chunk_bytes.
  size_t device_one_shot_max_bytes = size_t{256} << 10;
  size_t device_chunk_bytes = size_t{64} << 20;
};

// Thread-compatible: one thread, the progress loop's.
class AllReduceGroup {
 public:
  // Errors: RingAllReduce::Create's and HostAllReduce::Create's (other than
  // kUnimplemented, which means: no direct access, the ring it is), and
  // GroupByHost's.
  // Every algorithm runs on `links` (its endpoints, watches and store), on
  // their loop (options.ring.loop: null or theirs).
  static absl::StatusOr<std::unique_ptr<AllReduceGroup>> Create(
      onesided::PeerLinks& links, std::vector<int> members,
      const AllReduceGroupOptions& options);
  // The same on links of its own (on options.ring.loop, or a loop of its
  // own), for a group alone on its transport.
  static absl::StatusOr<std::unique_ptr<AllReduceGroup>> Create(
      rdma::Transport& transport, rdma::Store& store, const std::string& ns,
      std::vector<int> members, const AllReduceGroupOptions& options);
  ~AllReduceGroup();

  // Host memory, or device memory with on_device() (then only device work
  // of its runtime touches it: copies and kernels, never loads and stores).
  std::byte* data() const { return data_->data(); }
  bool on_device() const { return mover_ != nullptr; }
  const rdma::MemoryRegion& data_region() const { return *data_; }
  size_t capacity() const { return data_->size(); }
  int size() const { return static_cast<int>(members_.size()); }
  int rank() const { return members_[position_]; }
  int position() const { return position_; }
  // Whether every member is on one host and they agreed on direct access
  // (the same-host algorithms run the calls).
  bool direct() const { return host_ != nullptr; }
  // Whether calls run hierarchically; how many hosts the members are on.
  bool hierarchical() const { return hierarchical_; }
  int hosts() const { return hosts_; }
  // The algorithm a call of `bytes` takes, and the one the last call took.
  AllReduceAlgorithm Choose(size_t bytes) const;
  AllReduceAlgorithm last_algorithm() const { return last_; }
  // Every algorithm together: calls; messages (the rings' writes, the host
  // paths' reads of a peer's range); bytes_sent (what crossed between
  // members: written by the rings, read by the host paths).
  RingAllReduceStats stats() const;
  const HostAllReduce* host() const { return host_.get(); }
  // Whether AllReduceExternal runs (HostAllReduce::external() on the
  // same-host members), else why not.
  bool external() const { return host_ != nullptr && host_->external(); }
  std::string external_refusal() const;

  // RingAllReduce::AllReduce's contract (the same count, type, operator
  // and variant on every member, in the same order), whichever algorithm
  // runs it. Each member may pass an offset of its own on every path (the
  // host algorithms read each member's range where it lies, the rings
  // learn their neighbours' from the call descriptors), so a caller that
  // stages on one member and reduces in place on another needs no
  // agreement first. Calls that differ between members are an error on
  // every member: on the host paths kInvalidArgument, after which the
  // group goes on; on a ring kAborted, after which it is unusable.
  // `variant`: HostAllReduce::AllReduce's.
  // `result`: where this member wants the result instead of its range (a
  // buffer of count elements; nullptr, or the range itself: in place): the
  // host paths write it
  // there directly (HostAllReduce::AllReduce: outside the data region, else
  // kInvalidArgument on every member), the ring and the hierarchy copy it
  // out of the range (on_device(): device memory outside the range, else
  // kInvalidArgument after the call). After an error it holds unspecified
  // bytes.
  // On device memory, float32, float16 and bfloat16 by sum or max
  // (kInvalidArgument on every member otherwise). A member whose copy to
  // or from the host fails leaves the ring: its peers then wait out the
  // timeout.
  absl::Status AllReduce(size_t offset, size_t count, DataType type,
                         ReduceOp op = ReduceOp::kSum, uint8_t variant = 0,
                         std::byte* result = nullptr);

  // Copies `bytes` of the member at position `root` (from its `offset`)
  // into every other member's range at its own `offset`, read straight out
  // of the root's region: HostAllReduce::Broadcast, byte for byte, any
  // type, on host or device memory. Needs direct(): else
  // kFailedPrecondition on every member alike, before any wait (callers
  // with members on several hosts broadcast another way). Its errors as
  // AllReduce()'s; the same root, size and `variant` on every member.
  absl::Status Broadcast(size_t offset, size_t bytes, int root, uint8_t variant = 0);
  // AllReduce()'s contract in place on `buffer` (count elements of this
  // process's ordinary memory, not in the region): HostAllReduce::
  // AllReduceExternal, pairing with the other members' AllReduce() or
  // AllReduceExternal(). Needs external(): else kFailedPrecondition (and
  // on the host paths the other members' call fails too).
  absl::Status AllReduceExternal(std::byte* buffer, size_t count, DataType type,
                                 ReduceOp op = ReduceOp::kSum, uint8_t variant = 0);

  // Gives up our next call for `why` (returned), an error of ours before
  // it (a device copy that failed): every algorithm tells the members
  // waiting in it (RingAllReduce::Abandon, HostAllReduce::Abandon), which
  // fail it at once; the group is unusable after.
  absl::Status Abandon(absl::Status why);

  // Shuts down every algorithm (collective; once, after the last call),
  // all within `timeout` (the options' by default); the first error.
  absl::Status Shutdown(std::optional<absl::Duration> timeout = std::nullopt);

 private:
  AllReduceGroup() = default;
  // Sets up the hierarchy when every member can; false (on every member
  // alike) when some host's members have no direct access.
  absl::StatusOr<bool> TryHierarchy(onesided::PeerLinks& links, const HostGroups& hosts,
                                    const RingAllReduceOptions& ring,
                                    const AllReduceGroupOptions& options);
  absl::Status HierarchicalAllReduce(size_t offset, size_t count, DataType type,
                                     ReduceOp op, uint8_t variant);
  // kInvalidArgument / kOutOfRange for a range that is not the data
  // region's (`what` names the algorithm).
  absl::Status CheckRange(size_t offset, size_t count, DataType type,
                          const char* what) const;
  // `ring`'s all-reduce of the range: in place on host memory; on device
  // memory, on stage_ between a copy there and one back.
  absl::Status RingAllReduceOf(RingAllReduce& ring, size_t offset, size_t count,
                               DataType type, ReduceOp op, uint8_t variant);
  // The range's result into `result` (device memory: outside the range).
  absl::Status CopyResult(std::byte* result, size_t offset, size_t bytes);
  // Sets up device memory: the mover and the rings' host stage.
  absl::Status SetUpDevice(rdma::Transport& transport, const AllReduceGroupOptions& options,
                           const std::string& what);
  // Pins the stage, on device memory, on a member that runs a ring; a
  // refusal leaves it unpinned, with a message.
  void PinStage();
  // Every member publishes its direct and hierarchy options and checks the
  // others': kFailedPrecondition naming a member whose differ (they would
  // take another path and leave the others waiting).
  absl::Status AgreeOnSettings(rdma::Store& store, const std::string& ns,
                               const std::string& name, int rank,
                               const AllReduceGroupOptions& options, absl::Duration timeout);

  std::vector<int> members_;
  int position_ = 0;
  // Made by the Create() without links (the loop when options' is null):
  // destroyed after every algorithm, the links before the loop.
  onesided::OwnLinks own_;
  std::shared_ptr<rdma::MemoryRegion> data_;  // every algorithm's region
  // Device memory: the same-host paths' mover (outlives them), and the
  // rings' region: host memory pinned by `runtime_`.
  std::unique_ptr<DeviceDataMover> mover_;
  std::shared_ptr<rdma::MemoryRegion> stage_;
  device::DeviceRuntime* runtime_ = nullptr;
  bool stage_pinned_ = false;
  // A copy between the device and the stage that no fence saw finish.
  bool stage_copy_unfenced_ = false;
  std::unique_ptr<RingAllReduce> ring_;  // over every member; null if hierarchical
  std::unique_ptr<HostAllReduce> host_;  // every member, one host; else null
  // Hierarchical: our host's members (null when we are alone on it), and
  // the ring of the hosts' leaders (on the leaders only).
  std::unique_ptr<HostAllReduce> local_;
  std::unique_ptr<RingAllReduce> leaders_;
  bool hierarchical_ = false;
  int hosts_ = 1;
  int local_leader_ = -1;  // hierarchical: our host's first member
  AllReduceAlgorithm last_ = AllReduceAlgorithm::kNone;
  absl::Duration ring_options_timeout_;
};

}  // namespace rdmaflow::collectives

#endif  // RDMAFLOW_COLLECTIVES_ALLREDUCE_GROUP_H_
