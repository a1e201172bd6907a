// File: ibverbs_internal.h
// -----------------------------------------------------------------------------
// State shared by IbverbsTransport, its endpoints and its registrations. Not
// part of the API.
#ifndef RDMAFLOW_RDMA_IBVERBS_IBVERBS_INTERNAL_H_
#define RDMAFLOW_RDMA_IBVERBS_IBVERBS_INTERNAL_H_

#include <infiniband/verbs.h>

#include <cstdint>
#include <cstdlib>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rdma/endpoint.h"
#include "rdma/ibverbs/bootstrap.h"
#include "rdma/ibverbs/device.h"
#include "rdma/internal/notify_ring.h"
#include "rdma/ibverbs/rdmacm.h"
#include "rdma/ibverbs/verbs_raii.h"
#include "rdma/memory_region.h"

namespace rdmaflow::rdma::ibverbs {

inline constexpr char kBackend[] = "ibverbs";

// The device and protection domain. Registrations hold it, so a region may
// outlive its transport; members are in creation order (the PD goes before
// the device context).
struct VerbsContext {
  Device device;
  PdPtr pd;
};

// One ibv_reg_mr registration, and the memory when the transport allocated it.
class VerbsRegistration final : public MemoryRegion::Registration {
 public:
  VerbsRegistration(std::shared_ptr<VerbsContext> context, MrPtr mr,
                    void* owned)
      : context_(std::move(context)), mr_(std::move(mr)), owned_(owned) {}
  ~VerbsRegistration() override {
    mr_.reset();
    std::free(owned_);
  }

  uint32_t lkey() const { return mr_->lkey; }
  const VerbsContext* context() const { return context_.get(); }

 private:
  std::shared_ptr<VerbsContext> context_;
  MrPtr mr_;
  void* owned_;
};

// The packed key of a descriptor: "IBV1" and the 32-bit rkey
// (registration.cc).
std::string PackKey(uint32_t rkey);
// kInvalidArgument, naming the peer, for anything else.
absl::StatusOr<uint32_t> UnpackKey(absl::string_view packed, int peer_rank);

// One posted work request. Those with a callback are the caller's operations;
// the others are markers (ibverbs_endpoint.h).
struct WorkRequest {
  uint64_t seq = 0;
  Completion done;
  bool has_callback = false;
  const char* op = "";
  // Set when the rest of the operation was never posted: its callback gets
  // this whatever the adapter says of this request.
  absl::Status forced;
};

// An endpoint's queue pair and what is in flight on it. Owned jointly by the
// endpoint and SendQueues (which looks it up by id from completions).
struct EndpointState {
  uint64_t id = 0;
  int peer_rank = -1;
  QpPtr qp;
  UniqueFd connection;  // The handshake connection: closed = peer gone.
  std::unique_ptr<CmConnection> cm;  // With rdmacm, instead: disconnected.
  uint32_t max_inline = 0;
  QueuePairInfo remote;
  std::string description;
  // Flag notifications into the peer's ring (notify_ring.h), when it offered
  // one; else notifications are WRITE WITH IMMEDIATE.
  std::optional<NotifyRingWriter> ring;
  MemoryRegion credit;  // The word the peer writes its consumed count into.
  std::deque<WorkRequest> in_flight;  // In post order.
  uint64_t next_seq = 1;
  size_t operations = 0;      // Entries of in_flight with a callback.
  int unsignaled_run = 0;     // Posted unsignaled since the last signaled.
  bool tail_unsignaled = false;
  bool posted_since_progress = false;
  bool closed = false;
  // Notifications reserved on this queue pair, not yet posted (stripes).
  uint64_t reserved = 0;
  absl::Status failure;  // Set once the queue pair failed.
  // The queue pair is in the error state (Close(), a failed completion, a
  // dead peer): each request still in `in_flight` will end with a
  // completion, a flushed one with `stop_reason`. The adapter may touch a
  // request's buffers until then, so callbacks wait for it, until
  // `drain_deadline` (then the queue pair is destroyed, see Fence()).
  bool stopped = false;
  absl::Status stop_reason;
  absl::Time drain_deadline = absl::InfiniteFuture();
};

// wr_id = endpoint id << kSeqBits | sequence number.
inline constexpr int kSeqBits = 40;

}  // namespace rdmaflow::rdma::ibverbs

#endif  // RDMAFLOW_RDMA_IBVERBS_IBVERBS_INTERNAL_H_
