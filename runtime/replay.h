// File: replay.h
// -----------------------------------------------------------------------------
// Replayer: drives one rank of a plan's communication through a
// Communicator, step after step, with no compute (or a fixed compute delay):
// every tensor the rank sends is filled with a pattern derived from (seed,
// id, step), every tensor it receives is checked byte for byte against the
// same pattern. The ablation tool times it; the tests use it to prove
// byte-exact delivery on every path.
#ifndef RDMAFLOW_RUNTIME_REPLAY_H_
#define RDMAFLOW_RUNTIME_REPLAY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "graph_analyzer/plan.pb.h"
#include "rdma/memory_region.h"
#include "runtime/communicator.h"
#include "runtime/pool_allocator.h"
#include "runtime/rank_plan.h"

namespace rdmaflow::runtime {

struct ReplayOptions {
  uint64_t seed = 1;
  // New contents every step (tests: catches stale or overwritten slots), or
  // contents filled once per tensor (benchmarks: no fill cost per step).
  bool vary_content = true;
  // Check every received byte against the pattern. Off (the ablation's
  // timed steps): each received tensor is still read once, word by word
  // (SumWords, into received_sum()), as the compute that consumes it would
  // read it, so a zero-copy receiver is not timed without touching its data.
  bool verify = true;
  // Busy time per step after the receives, standing in for compute.
  absl::Duration compute_delay;
  // Registered memory to build sent tensors in (the zero-copy sender, as
  // runtime/torch's allocator does); null: ordinary heap memory.
  const rdma::MemoryRegion* arena = nullptr;
  // The size of each unknown (-1) dimension of a dynamic tensor at `step`.
  // Default: 8 at every step.
  std::function<int64_t(const TransferInfo&, int64_t step, int dim)>
      dynamic_dim;
};

// The bytes transfer `id` carries at `step` (with vary_content; else step 0).
void FillPattern(uint64_t seed, int id, int64_t step, std::byte* data,
                 size_t bytes);
// Index of the first byte that differs from the pattern, or -1.
int64_t FindMismatch(uint64_t seed, int id, int64_t step, const std::byte* data,
                     size_t bytes);

// The sum of `data`'s 64-bit words (native order, wrapping), its last
// bytes % 8 bytes added as one more word zero-extended: one read of every
// byte.
uint64_t SumWords(const std::byte* data, size_t bytes);

// Thread-compatible; one per rank.
class Replayer {
 public:
  // The rank's part of `plan`; kInvalidArgument as RankPlan::Create.
  static absl::StatusOr<std::unique_ptr<Replayer>> Create(
      const plan::TransferPlan& plan, int rank, ReplayOptions options);

  // Sends every tensor of the rank for `step` (in plan order), receives and
  // checks every tensor it receives, then calls FinishStep(). kDataLoss
  // naming the tensor, step and byte offset when a received byte is wrong;
  // the communicator's errors otherwise. Returns the step's duration.
  absl::StatusOr<absl::Duration> RunStep(Communicator& communicator,
                                         int64_t step);

  // Switches options().verify for the next steps (the ablation checks its
  // warm-up steps and times the rest).
  void set_verify(bool verify) { options_.verify = verify; }
  // SumWords of every tensor received while verify was off, summed.
  uint64_t received_sum() const { return received_sum_; }

  const RankPlan& rank_plan() const { return rank_plan_; }
  // Bytes this rank sends and receives per step (static tensors; dynamic
  // ones at their step-0 shape).
  uint64_t bytes_per_step() const;

 private:
  Replayer(RankPlan rank_plan, ReplayOptions options);
  std::vector<int64_t> ShapeAt(const TransferInfo& info, int64_t step) const;
  absl::StatusOr<OutgoingTensor> MakeTensor(const TransferInfo& info,
                                            int64_t step);

  RankPlan rank_plan_;
  ReplayOptions options_;
  std::unique_ptr<PoolAllocator> arena_pool_;
  // With fixed contents: each tensor is built once and reused.
  std::map<int, OutgoingTensor> fixed_;
  uint64_t received_sum_ = 0;
};

}  // namespace rdmaflow::runtime

#endif  // RDMAFLOW_RUNTIME_REPLAY_H_
