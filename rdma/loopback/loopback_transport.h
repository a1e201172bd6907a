// File: loopback_transport.h
// -----------------------------------------------------------------------------
// LoopbackTransport: an in-process backend with the semantics of the real
// ones (one-sided copies, notifications, bounds and key checks, completions
// fired from Progress()), for unit tests of everything above rdma/. Ranks are
// transports sharing one LoopbackFabric; a destroyed transport is a dead peer.
#ifndef RDMAFLOW_RDMA_LOOPBACK_LOOPBACK_TRANSPORT_H_
#define RDMAFLOW_RDMA_LOOPBACK_LOOPBACK_TRANSPORT_H_

#include <cstddef>
#include <deque>
#include <memory>

#include "absl/status/statusor.h"
#include "rdma/internal/completion_queue.h"
#include "rdma/loopback/loopback_fabric.h"
#include "rdma/transport.h"
#include "rdma/transport_registry.h"

namespace rdmaflow::rdma::loopback {

struct LoopbackTransportOptions {
  int rank = 0;
  // Ranks that should reach each other share a fabric. Null: the process-wide
  // default fabric.
  std::shared_ptr<LoopbackFabric> fabric;
  // Operations one endpoint accepts in flight before kResourceExhausted.
  size_t max_outstanding_per_endpoint = 256;
  // Endpoint::OrdersWrites() answers true, as it may (operations run in post
  // order): callers then order a flag behind its payload without a flush,
  // as over UCX's TCP. False by default, so that they flush, as over
  // transports that do not order writes; tests run both.
  bool orders_writes = false;
};

// Thread-compatible (see Transport). Operations are executed, in post order,
// by Progress().
class LoopbackTransport final : public Transport {
 public:
  // kAlreadyExists if the rank already has a transport on the fabric;
  // kInvalidArgument for a negative rank or zero max_outstanding.
  static absl::StatusOr<std::unique_ptr<LoopbackTransport>> Create(
      LoopbackTransportOptions options);
  ~LoopbackTransport() override;

  int rank() const override { return options_.rank; }
  Capabilities capabilities() const override;
  std::string address() const override;
  absl::StatusOr<MemoryRegion> Allocate(size_t bytes) override;
  absl::StatusOr<MemoryRegion> Register(absl::Span<std::byte> memory) override;
  absl::StatusOr<std::unique_ptr<Endpoint>> Connect(
      const PeerInfo& peer) override;
  absl::StatusOr<int> Progress() override;
  std::optional<Notification> PollNotification() override;

 private:
  friend class LoopbackEndpoint;
  // Shared by an endpoint and its queued operations, which may outlive it.
  struct EndpointState {
    int peer_rank;
    bool closed = false;
    size_t outstanding = 0;
    absl::Status failure;  // Set once the peer is found dead.
  };

  struct Op {
    enum class Kind { kWrite, kRead, kFlush };
    Kind kind;
    std::shared_ptr<EndpointState> endpoint;
    std::byte* local = nullptr;
    uint64_t address = 0;
    uint64_t key = 0;
    size_t length = 0;
    std::optional<uint32_t> notification;
    Completion done;
    // A flagged write's flag, stored into the peer's word at
    // `flag_address` (key `flag_key`) once the data is copied.
    std::optional<uint64_t> flag;
    uint64_t flag_address = 0;
    uint64_t flag_key = 0;
  };

  explicit LoopbackTransport(LoopbackTransportOptions options)
      : options_(std::move(options)) {}
  absl::StatusOr<MemoryRegion> MakeRegion(std::byte* data, size_t size,
                                          bool owned);
  void Execute(Op& op);

  const LoopbackTransportOptions options_;
  std::deque<Op> pending_;
  internal::CompletionQueue completions_;
};

// Registers "loopback" (process-wide default fabric; parameter
// max_outstanding) with `registry`.
absl::Status RegisterLoopbackTransport(TransportRegistry& registry);

}  // namespace rdmaflow::rdma::loopback

#endif  // RDMAFLOW_RDMA_LOOPBACK_LOOPBACK_TRANSPORT_H_
