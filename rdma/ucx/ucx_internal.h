// File: ucx_internal.h
// -----------------------------------------------------------------------------
// State shared by UcxTransport and UcxEndpoint: the UCP context holder, memory
// registrations, per-endpoint state and in-flight operations. Private to
// rdma/ucx.
#ifndef RDMAFLOW_RDMA_UCX_UCX_INTERNAL_H_
#define RDMAFLOW_RDMA_UCX_UCX_INTERNAL_H_

#include <ucp/api/ucp.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rdma/endpoint.h"
#include "rdma/internal/completion_queue.h"
#include "rdma/memory_region.h"
#include "rdma/ucx/flag_inbox.h"
#include "rdma/ucx/peer_liveness.h"

namespace rdmaflow::rdma::ucx {

struct UcxEndpointState;

// Owns the ucp_context; shared by the transport and its memory regions so
// that a region may outlive the transport's worker.
struct UcxContext {
  ucp_context_h context = nullptr;
  ~UcxContext() {
    if (context != nullptr) ucp_cleanup(context);
  }
};

// One ucp_mem_map; unmapping frees memory that UCX allocated.
struct UcxRegistration final : MemoryRegion::Registration {
  UcxRegistration(std::shared_ptr<UcxContext> context, ucp_mem_h memh)
      : context(std::move(context)), memh(memh) {}
  ~UcxRegistration() override;

  std::shared_ptr<UcxContext> context;
  ucp_mem_h memh;
};

struct UcxEndpointState;

// One accepted operation, from post until its completion is queued.
struct UcxOp {
  enum class Kind { kData, kNotify, kFlush };
  // kNotify: its flush is in flight, then it waits its turn, then its
  // active message is in flight (or its flag record is stored).
  enum class Stage { kFlushing, kReady, kSending };

  Kind kind;
  const char* what;  // "write", "read", "flush": for messages.
  std::shared_ptr<UcxEndpointState> endpoint;
  Completion done;
  Stage stage = Stage::kFlushing;
  absl::Status flush_status;
  uint32_t payload[2] = {0, 0};  // Notification: sender rank, value.
                                 // Flagged write: the flag.
  // A flag notification (flag_inbox.h): once its flush is done, its record
  // (in `payload`) is stored into slot `slot` of the endpoint's lane.
  bool flag = false;
  uint32_t slot = 0;
  // A flagged write's flag (Endpoint::PostWriteWithFlag): once its flush is
  // done, the 8 bytes of `payload` are stored at `word_mapped` (a mapped
  // same-host peer) or put at `word_address` under `word_rkey` (one of the
  // endpoint's cached keys).
  bool word = false;
  std::byte* word_mapped = nullptr;
  uint64_t word_address = 0;
  ucp_rkey_h word_rkey = nullptr;
  // Completed (UcxOps::AbandonInFlight) while UCX still held its request;
  // freed when (if ever) UCX calls back.
  bool abandoned = false;
};

// The worker's side of the transport, shared with its endpoints and their
// operations (UcxOps, ucx_endpoint.h): the UCX worker, the completions
// Progress() fires, and the endpoints whose notifications may advance,
// whose same-host peer the watchdog checks, or whose graceful close is in
// flight. Owned by the transport, which must outlive its endpoints; the
// endpoints reach only this, never the transport's private state.
struct UcxWorkerState {
  ucp_worker_h worker = nullptr;
  ucp_context_h context = nullptr;  // regions of another context are refused
  int rank = 0;
  size_t max_outstanding_per_endpoint = 0;
  // Copies into a same-host peer's mapped memory of at least this many
  // bytes use streaming stores (CopyToPeer); 0: never.
  size_t streaming_copy_min = 0;
  internal::CompletionQueue completions;
  // Endpoints whose notification sequence may advance.
  std::vector<std::shared_ptr<UcxEndpointState>> to_pump;
  // Same-host endpoints whose peer process the watchdog checks (also while
  // they close, until UCX has given back their operations).
  std::vector<std::weak_ptr<UcxEndpointState>> watched;
  // Graceful endpoint closes in flight (UcxOps::ReleaseEndpoint); each keeps
  // its endpoint's remote keys alive until UCX is done with them.
  struct Closing {
    ucs_status_ptr_t request;
    std::shared_ptr<UcxEndpointState> state;
  };
  std::vector<Closing> closing;
  // Endpoints destroyed while completions of theirs were still queued
  // without a reference (UcxEndpoint::CompleteNow): kept until those fired,
  // so that the queue's pointers to their `outstanding` count stay valid.
  std::vector<std::shared_ptr<UcxEndpointState>> retired;
};

// Shared by a UcxEndpoint and its in-flight operations, which may outlive it.
struct UcxEndpointState {
  UcxWorkerState* worker = nullptr;
  int peer_rank = -1;
  ucp_ep_h ep = nullptr;
  bool closed = false;
  absl::Status failure;  // Set by the UCX error handler or the watchdog.
  // Peers whose process we can check (same host and PID namespace,
  // peer_liveness.h) are watched by the transport's watchdog; any other peer
  // by UCX's peer error handling (UCP_ERR_HANDLING_MODE_PEER).
  bool watched = false;
  ProcessIdentity peer_identity;
  // Every operation goes down one TCP connection (OneTcpLane, ep_lanes.h):
  // Endpoint::OrdersWrites().
  bool orders_writes = false;
  size_t outstanding = 0;
  // Unpacked remote keys by packed key.
  absl::flat_hash_map<std::string, ucp_rkey_h> rkeys;
  // A same-host peer over shared memory (watched, shared memory in `tls`):
  // its regions that map here are copied to and from instead of posted.
  bool copies = false;
  // Where each region of the peer lies here (ucp_rkey_ptr): its address
  // plus `delta`, by packed key and extent, each extent checked once
  // against our shared mappings (process_maps.h).
  struct Mapping {
    bool mapped = false;
    uintptr_t delta = 0;
  };
  using Extent = std::tuple<std::string, uint64_t, uint64_t>;  // key, address, length
  absl::flat_hash_map<Extent, Mapping> mappings;
  // The region used last, which most posts use again (an equality test
  // costs less than the maps' hashes of the packed key), and its mapping.
  std::string last_key;
  uint64_t last_address = 0;
  uint64_t last_length = 0;
  ucp_rkey_h last_rkey = nullptr;
  Mapping last_mapping;
  // A write to this peer went through UCX (a region that does not map):
  // from then on notified writes go through UCX as well, their records
  // stored after a flush, so that they stay behind that data (see
  // UcxEndpoint::PostWrite), and flushes are UCX's. Until then a flush
  // with no UCX request in flight has nothing to wait for.
  bool wrote_through_ucx = false;
  // Flag notifications (flag_inbox.h): the peer's inbox, mapped at
  // Connect() when it offered one that this process could map, and our
  // lane in it, claimed at the first notified write; otherwise (or when
  // every lane is taken) notifications go by active message. `notify` says
  // which, and why (Endpoint::Describe()). Released with the keys.
  std::byte* inbox = nullptr;
  ucp_rkey_h inbox_rkey = nullptr;
  FlagInboxLayout inbox_layout;
  std::optional<FlagLane> lane;
  std::string notify = "notify am";
  // Keys unpacked for MapRemote: their mappings are in the caller's hands,
  // so a close the transport starts (a dead peer) leaves them, and only the
  // endpoint's own Close() releases them. A dead peer's pages stay mapped
  // until then: reads see its last words instead of a fault.
  std::vector<ucp_rkey_h> mapped_rkeys;
  // Notified writes and flushes in post order. A notification's active
  // message goes out only after its own flush and every earlier entry, so
  // notifications arrive in post order and after their data.
  std::deque<UcxOp*> sequence;
  // Operations whose UCX request has not called back yet.
  absl::flat_hash_set<UcxOp*> in_flight;
};

// Id of the active message that carries notifications.
constexpr unsigned kNotificationAmId = 0x52;  // 'R'

}  // namespace rdmaflow::rdma::ucx

#endif  // RDMAFLOW_RDMA_UCX_UCX_INTERNAL_H_
