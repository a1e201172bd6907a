// File: rank_plan.h
// -----------------------------------------------------------------------------
// RankPlan: the part of a TransferPlan one rank executes, checked and
// flattened for the data path: for each transfer id, which link and slot it
// uses, where the slot sits in the region, and how many bytes move. Shared
// by every Communicator implementation.
#ifndef RDMAFLOW_RUNTIME_RANK_PLAN_H_
#define RDMAFLOW_RUNTIME_RANK_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "graph_analyzer/plan.pb.h"

namespace rdmaflow::runtime {

// One transfer (TensorSlot) as the data path sees it. Value type.
struct TransferInfo {
  int id = -1;
  std::string tensor;  // "node:k"
  graph::TensorSpec spec;
  bool dynamic = false;
  int src_rank = -1;
  int dst_rank = -1;
  int link = -1;        // index into TransferPlan.link
  int slot_index = -1;  // index into LinkRegion.slot
  // A device slot: static, in the link's device region (offset and
  // stage_bytes are of that region), written from device memory or host
  // memory into the receiver's device memory.
  bool device = false;
  // The sender holds the tensor in device memory (plan's source_memory).
  bool device_source = false;
  uint64_t offset = 0;  // within a stage of the slot's region
  uint64_t slot_bytes = 0;
  uint64_t stage_bytes = 0;
  int depth = 1;
  int live_begin = 0;
  int live_end = 0;
  // Bytes of the tensor (static) or 0 (dynamic: known per step).
  uint64_t data_bytes = 0;
  int64_t element_bytes = 0;

  // "tensor 'fc1/w:0' (id 3, rank 0 -> 1)", for error messages.
  std::string Describe() const;
};

// Immutable after Create. Thread-safe.
class RankPlan {
 public:
  // Flattens and checks `plan` for `rank`. kInvalidArgument ("malformed
  // plan: ...") for a rank outside the world, duplicate or negative ids, a
  // slot outside its stage, a region size that is not stage * depth, a depth
  // outside 1..16, a static slot smaller than its tensor, a dynamic slot too
  // small for its metadata, a memory that is neither host nor device.
  static absl::StatusOr<RankPlan> Create(const plan::TransferPlan& plan,
                                         int rank);

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const plan::TransferPlan& plan() const { return plan_; }

  // Transfers this rank sends / receives, by id.
  const std::vector<TransferInfo>& sends() const { return sends_; }
  const std::vector<TransferInfo>& recvs() const { return recvs_; }
  // Indices into plan().link() of links into / out of this rank.
  const std::vector<int>& recv_links() const { return recv_links_; }
  const std::vector<int>& send_links() const { return send_links_; }
  // Ranks this rank exchanges anything with, ascending.
  const std::vector<int>& peers() const { return peers_; }

  // The transfer `id` if this rank sends (receives) it; else
  // kInvalidArgument saying who does, or that the plan has no such id.
  absl::StatusOr<const TransferInfo*> FindSend(int id) const;
  absl::StatusOr<const TransferInfo*> FindRecv(int id) const;
  // The id of the transfer of `tensor` ("node:k") this rank sends to (or,
  // with send = false, receives from) `peer`; kNotFound naming both.
  absl::StatusOr<int> IdOf(bool send, const std::string& tensor, int peer) const;

 private:
  absl::StatusOr<const TransferInfo*> Find(
      int id, const std::vector<int>& index,
      const std::vector<TransferInfo>& list, bool send) const;

  int rank_ = 0;
  int world_size_ = 0;
  plan::TransferPlan plan_;
  std::vector<TransferInfo> all_;  // by id; id -1 where unused
  std::vector<TransferInfo> sends_;
  std::vector<TransferInfo> recvs_;
  std::vector<int> send_index_;  // id -> index in sends_, or -1
  std::vector<int> recv_index_;
  std::vector<int> recv_links_;
  std::vector<int> send_links_;
  std::vector<int> peers_;
};

// For a communicator that never reads device memory with the CPU (the
// executor): kFailedPrecondition naming the first transfer this rank sends
// or receives that is held in device memory but lands in host memory.
absl::Status CheckDeviceSources(const RankPlan& plan);

// For a communicator that moves or checks every tensor with the CPU (gRPC,
// rdma_copy, the replayer, named by `who`): kFailedPrecondition naming the
// first transfer of this rank that lives in device memory at either end.
absl::Status CheckHostMemoryOnly(const RankPlan& plan, absl::string_view who);

// Metadata slot layout of a dynamic tensor (words of 8 bytes): sequence + 1,
// byte count, source offset in the sender's pool, sender rank, then one word
// per dimension. See graph_analyzer/planner.h (metadata_bytes).
inline constexpr int kMetadataHeaderWords = 4;

// Bytes of a tensor of `shape` whose elements have `element_bytes`, checking
// it against `info.spec` (same rank, known dimensions equal, none negative).
// kInvalidArgument naming the transfer otherwise.
absl::StatusOr<uint64_t> CheckShape(const TransferInfo& info,
                                    absl::Span<const int64_t> shape);

}  // namespace rdmaflow::runtime

#endif  // RDMAFLOW_RUNTIME_RANK_PLAN_H_
