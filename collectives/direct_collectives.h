// File: direct_collectives.h
// -----------------------------------------------------------------------------
// DirectCollectives: the collectives that do not reduce in a ring, over a
// Messenger: every member sends its part straight to the members that need
// it (broadcast from the root, all-gather, reduce-scatter and all-to-all
// straight to every peer, barrier as empty messages). The members are the
// messenger's (every rank of its world unless its options name some), and
// "per rank" buffers are one per member, in the members' order. Each call
// is one collective with its own tag, so ranks that disagree on the order
// of calls get an error, not each other's data. Users: the c10d backend's
// process group (which maps tensors onto it), the compressed all-reduce
// (its gathers of encoded messages).
//
//   DirectCollectives direct(messenger, absl::Minutes(30));
//   RETURN_IF_ERROR(direct.Broadcast(/*root=*/0, data, bytes));
#ifndef RDMAFLOW_COLLECTIVES_DIRECT_COLLECTIVES_H_
#define RDMAFLOW_COLLECTIVES_DIRECT_COLLECTIVES_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "collectives/reduce.h"
#include "onesided/messenger.h"

namespace rdmaflow::collectives {

// Tags at and above this are the collectives'; user point-to-point tags
// are below it.
inline constexpr uint64_t kCollectiveTagBase = uint64_t{1} << 62;

// Thread-compatible: the messenger's thread calls it. Every rank of the
// messenger must make the same calls in the same order.
class DirectCollectives {
 public:
  DirectCollectives(onesided::Messenger& messenger, absl::Duration timeout);

  // Below, "rank" is a member's rank, "per member" and outputs[m] are in
  // the members' order (by rank, 0..world-1, when the messenger has every
  // rank), and "in member order" is that order. A root must be a member.

  // The root's `bytes` at `data` into every other rank's `data`.
  absl::Status Broadcast(int root, void* data, size_t bytes);

  // op over every member's `count` elements at `data`, in member order, into
  // the root's `data` (other ranks' data is left as it was).
  absl::Status Reduce(int root, void* data, size_t count, DataType type,
                      ReduceOp op);

  // Every member's `bytes` from `input` into outputs[m] at the root
  // (`outputs` has one buffer per member there, and is ignored elsewhere).
  absl::Status Gather(int root, const void* input, size_t bytes,
                      const std::vector<void*>& outputs);

  // The root's inputs[m] into member m's `output` (`inputs` has one buffer
  // per member at the root, and is ignored elsewhere).
  absl::Status Scatter(int root, const std::vector<const void*>& inputs, void* output,
                       size_t bytes);

  // Every member's `bytes` from `input` into outputs[m] on every member
  // (outputs has one buffer per member, this one's included).
  absl::Status AllGather(const void* input, size_t bytes,
                         const std::vector<void*>& outputs);

  // output = op over members m of (member m's inputs[this member]), reduced
  // in member order so every member's result is bitwise that of a local
  // loop. inputs has one buffer of `count` elements per member; `output`
  // may be this member's own input.
  absl::Status ReduceScatter(const std::vector<const void*>& inputs, void* output,
                             size_t count, DataType type,
                             ReduceOp op);

  // inputs[m] (input_bytes[m] bytes) to member m, and member m's part for
  // us into outputs[m] (output_bytes[m] bytes), this member's own part
  // copied (its two sizes must be equal). A part whose size differs from
  // what its sender sends is kInvalidArgument naming the sender. Every
  // vector has one entry per member.
  absl::Status AllToAll(const std::vector<const void*>& inputs,
                        const std::vector<size_t>& input_bytes,
                        const std::vector<void*>& outputs,
                        const std::vector<size_t>& output_bytes);

  // Returns once every member has entered it.
  absl::Status Barrier();

  // Every member's bytes (up to capacities[m], its `bytes` here) into
  // outputs[m] on every member; the sizes received, by member. A message
  // larger than its output is kInvalidArgument naming its sender.
  absl::StatusOr<std::vector<size_t>> AllGatherV(const void* input, size_t bytes,
                                                 const std::vector<void*>& outputs,
                                                 const std::vector<size_t>& capacities);

  // Every member's `record`, per member (an all-gather of small strings).
  // Members compare what they are about to do with it.
  absl::StatusOr<std::vector<std::string>> Exchange(const std::string& record);

 private:
  // Sends and receives of one call, and their outcome.
  struct Batch;
  uint64_t NextTag() { return kCollectiveTagBase + next_call_++; }
  absl::Status Finish(Batch& batch, absl::string_view what);
  absl::Status CheckRoot(int root, absl::string_view what) const;
  absl::Status CheckPerRank(size_t buffers, absl::string_view what) const;

  int size() const { return static_cast<int>(members_.size()); }

  onesided::Messenger& messenger_;
  const absl::Duration timeout_;
  const std::vector<int> members_;  // the messenger's
  const int position_;              // this rank's among them
  uint64_t next_call_ = 0;
};

}  // namespace rdmaflow::collectives

#endif  // RDMAFLOW_COLLECTIVES_DIRECT_COLLECTIVES_H_
