// File: compressed_allreduce.h
// -----------------------------------------------------------------------------
// CompressedAllReduce: a sum over members of a float32 tensor, sent through a
// gradient codec (codec.h). It runs the codec's rounds over rdma/:
//   - all-reduce rounds with the collectives' AllReduceGroup, whose
//     registered data region is the codec's scratch: the codec encodes
//     where the ring (or the same-host direct path) reads, and decodes where
//     it wrote;
//   - all-gather rounds over a Messenger among the members: each member's
//     message goes to every other straight from the scratch (no staging),
//     into a buffer of the codec's largest message; it carries its own
//     length, so sizes are not agreed first.
//
//   CompressedAllReduceOptions options;
//   options.codec = "topk:ratio=0.01";
//   options.group.ring.loop = &loop;
//   ASSIGN_OR_RETURN(auto exchange, CompressedAllReduce::Create(
//       loop, store, "job", {0, 1, 2, 3}, gradient.size(), options));
//   RETURN_IF_ERROR(exchange->AllReduce(absl::MakeSpan(gradient), 0.25f));
//   RETURN_IF_ERROR(exchange->Shutdown());
#ifndef RDMAFLOW_COMPRESSION_COMPRESSED_ALLREDUCE_H_
#define RDMAFLOW_COMPRESSION_COMPRESSED_ALLREDUCE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "collectives/allreduce_group.h"
#include "collectives/direct_collectives.h"
#include "compression/codec.h"
#include "onesided/links/peer_links.h"
#include "onesided/messenger.h"
#include "onesided/progress/progress_loop.h"
#include "rdma/store.h"

namespace rdmaflow::compression {

struct CompressedAllReduceOptions {
  // Names the exchange in the store (unique per namespace).
  std::string name = "compressed";
  // CreateCodec()'s spec.
  std::string codec = "topk";
  // Shared by every member (random-k's indices, the sketch's hashes).
  uint64_t seed = 0;
  // The all-reduce rounds' group: its ring's chunk, slots, timeout, wait,
  // direct access and hierarchy (name, capacity and loop are set here).
  collectives::AllReduceGroupOptions group;
};

// What the exchange did, summed over its calls.
struct CompressionStats {
  int64_t calls = 0;
  // Bytes this member put on the wire (ring writes, the host paths' reads,
  // all-gather messages), and the float32 bytes the calls stood in for.
  int64_t wire_bytes = 0;
  int64_t dense_bytes = 0;
  // In the codec: encoding (Begin() and every round but the last) and
  // decoding (the last round's Next()).
  absl::Duration encode_time;
  absl::Duration decode_time;
};

// Thread-compatible: the thread that drives `loop`.
class CompressedAllReduce {
 public:
  // Collective over `members` (global ranks, the same list on every member,
  // this one among them), for tensors of `count` float32 elements. Errors:
  // CreateCodec()'s (kInvalidArgument naming the codec), AllReduceGroup's
  // and Messenger::Create()'s.
  // Its rounds' group and its gathers' messenger run on `links` (their
  // endpoints and watches, shared with the caller's other protocols; the
  // links must outlive the exchange).
  static absl::StatusOr<std::unique_ptr<CompressedAllReduce>> Create(
      onesided::PeerLinks& links, std::vector<int> members, size_t count,
      const CompressedAllReduceOptions& options);
  // The same on links of its own over `loop`'s transport, under `ns`.
  static absl::StatusOr<std::unique_ptr<CompressedAllReduce>> Create(
      onesided::ProgressLoop& loop, rdma::Store& store, const std::string& ns,
      std::vector<int> members, size_t count, const CompressedAllReduceOptions& options);
  // Destroyed on the loop's thread. After a call that gave up on the
  // messages (a timeout), waits up to the timeout for the sends it abandoned
  // to leave the scratch; after any failed call (or sends that never leave)
  // the scratch and the messenger stay mapped (leaked, logged) rather than
  // have a write read freed memory.
  ~CompressedAllReduce();

  // Every member calls it, in the same order: `data` (count elements) is
  // replaced by the codec's decoded sum over the members times `scale`.
  // What a member did not send stays in its codec's residual for the next
  // call. Errors: the collectives' (kDeadlineExceeded naming the member
  // waited for), the codec's kDataLoss for a forged message or value; after
  // any error the exchange is unusable (kFailedPrecondition quoting it).
  absl::Status AllReduce(absl::Span<float> data, float scale);

  // Collective: after the last AllReduce(); within the group's timeout.
  absl::Status Shutdown();

  const Codec& codec() const { return *codec_; }
  CompressionStats stats() const { return stats_; }
  int size() const { return static_cast<int>(members_.size()); }

 private:
  CompressedAllReduce() = default;
  absl::Status Run(absl::Span<float> data, float scale);
  // Sends this member's message to every other member and receives theirs
  // (DirectCollectives::AllGatherV).
  absl::Status AllGather(const Round& round, std::vector<absl::Span<const std::byte>>& gathered);
  int64_t WireBytesSoFar() const;

  std::vector<int> members_;
  int position_ = 0;
  onesided::ProgressLoop* loop_ = nullptr;
  absl::Duration timeout_;
  std::unique_ptr<Codec> codec_;
  // Links of its own (the Create() without links), or null: one endpoint
  // and watch per peer for the rounds' group and the gathers' messenger
  // (declared first: it goes last).
  std::unique_ptr<onesided::PeerLinks> own_links_;
  std::unique_ptr<collectives::AllReduceGroup> group_;  // its region: the scratch
  std::unique_ptr<onesided::Messenger> messenger_;      // codecs that gather
  std::unique_ptr<collectives::DirectCollectives> direct_;  // over messenger_
  std::vector<std::vector<std::byte>> inbox_;           // per member
  uint64_t calls_ = 0;
  absl::Status failure_;
  CompressionStats stats_;
};

}  // namespace rdmaflow::compression

#endif  // RDMAFLOW_COMPRESSION_COMPRESSED_ALLREDUCE_H_
