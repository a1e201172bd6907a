// File: ibverbs_transport.h
// -----------------------------------------------------------------------------
// IbverbsTransport: the native verbs backend over libibverbs (rdma-core), for
// InfiniBand and RoCE NICs (and Soft-RoCE). One reliable-connected queue pair
// per connected peer; RDMA WRITE, WRITE WITH IMMEDIATE (the notification, on
// a shared receive queue), RDMA READ; inline sends for small writes;
// selective signaling. Regions are page-aligned memory registered with
// ibv_reg_mr. Peers exchange queue-pair details through a TCP handshake whose
// address is the transport's address() (bootstrap.h). See docs/ibverbs.md.
#ifndef RDMAFLOW_RDMA_IBVERBS_IBVERBS_TRANSPORT_H_
#define RDMAFLOW_RDMA_IBVERBS_IBVERBS_TRANSPORT_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rdma/ibverbs/bootstrap.h"
#include "rdma/ibverbs/device.h"
#include "rdma/ibverbs/ibverbs_internal.h"
#include "rdma/ibverbs/queue_pair.h"
#include "rdma/internal/completion_queue.h"
#include "rdma/transport.h"
#include "rdma/transport_registry.h"

namespace rdmaflow::rdma::ibverbs {

struct IbverbsTransportOptions {
  int rank = 0;
  DeviceOptions device;
  // Address peers use for the handshake. Empty: the IPv4 address in the
  // chosen RoCE GID, else this host name's address, else 127.0.0.1.
  std::string bootstrap_host;
  absl::Duration connect_timeout = absl::Seconds(10);
  // Operations one endpoint accepts in flight before kResourceExhausted.
  size_t max_outstanding_per_endpoint = 256;
  // Every n-th work request is signaled (selective signaling); the rest
  // complete with it. An idle endpoint's unsignaled tail is completed by a
  // signaled 8-byte marker read.
  int signal_every = 16;
  // Writes up to this size go inline (if the device allows as much).
  uint32_t max_inline = 64;
  // Local ACK timeout exponent (4.096 us * 2^n) and retry count: a dead peer
  // fails operations after about retry_count * that.
  int ack_timeout = 14;
  int retry_count = 7;
  // Receives kept posted on the shared receive queue (notifications).
  int receive_depth = 512;
};

// Thread-compatible (see Transport); its handshake listener runs on a thread
// of its own and shares only the queue-pair table, under a mutex.
class IbverbsTransport final : public Transport {
 public:
  // kUnavailable when there is no usable RDMA device (with what to check).
  static absl::StatusOr<std::unique_ptr<IbverbsTransport>> Create(
      const IbverbsTransportOptions& options);
  ~IbverbsTransport() override;

  int rank() const override { return options_.rank; }
  Capabilities capabilities() const override;
  std::string address() const override { return address_; }
  absl::StatusOr<MemoryRegion> Allocate(size_t bytes) override;
  absl::StatusOr<MemoryRegion> Register(absl::Span<std::byte> memory) override;
  absl::StatusOr<std::unique_ptr<Endpoint>> Connect(
      const PeerInfo& peer) override;
  absl::StatusOr<int> Progress() override;
  std::optional<Notification> PollNotification() override;

 private:
  friend class IbverbsEndpoint;

  explicit IbverbsTransport(const IbverbsTransportOptions& options)
      : options_(options) {}
  absl::Status Init();
  absl::StatusOr<MemoryRegion> RegisterMemory(void* data, size_t bytes,
                                              void* owned);
  absl::Status PostReceives(int count);
  // Answers a peer's handshake (on the listener thread).
  absl::StatusOr<QueuePairInfo> Accept(const QueuePairInfo& request);
  QueuePairOptions QpOptions() const;
  QueuePairInfo WithMarker(QueuePairInfo info) const;

  // The data path, called by IbverbsEndpoint and Progress().
  // One operation of `length` bytes from `sge.addr`, split into work
  // requests of at most the device's largest message.
  absl::Status PostOperation(EndpointState& state, ibv_wr_opcode opcode,
                             std::optional<uint32_t> notification,
                             const ibv_sge& sge, uint64_t length,
                             uint64_t remote_address, uint32_t rkey,
                             Completion done, const char* op);
  absl::Status Post(EndpointState& state, ibv_send_wr& wr, Completion done,
                    bool has_callback, const char* op, bool force_signal);
  absl::Status PostMarker(EndpointState& state, Completion done,
                          bool has_callback);
  void Complete(EndpointState& state, WorkRequest& request,
                absl::Status status);
  void HandleSendCompletion(const ibv_wc& wc);
  void FailAll(EndpointState& state, const absl::Status& status);
  void Forget(uint64_t endpoint_id);
  // Fails the endpoints whose peer closed its handshake connection.
  void WatchPeers();

  const IbverbsTransportOptions options_;
  std::shared_ptr<VerbsContext> context_;
  CqPtr send_cq_;
  CqPtr recv_cq_;
  SrqPtr srq_;
  // 64 readable bytes (the peers' marker target) and 64 scratch bytes.
  MemoryRegion marker_;
  std::string address_;
  std::string description_;

  absl::Mutex mutex_;
  absl::flat_hash_map<uint32_t, int> rank_of_qp_ ABSL_GUARDED_BY(mutex_);
  std::vector<QpPtr> accepted_ ABSL_GUARDED_BY(mutex_);

  absl::flat_hash_map<uint64_t, std::shared_ptr<EndpointState>> endpoints_;
  uint64_t next_endpoint_id_ = 1;
  absl::Time next_watch_ = absl::InfinitePast();
  ::rdmaflow::rdma::internal::CompletionQueue completions_;
  std::deque<Notification> notifications_;
  std::unique_ptr<BootstrapListener> listener_;  // Stopped first.
};

// Registers "ibverbs" (priority 50) with parameters device, port, gid_index,
// bootstrap_host, max_outstanding, signal_every, ack_timeout, retry_count.
absl::Status RegisterIbverbsTransport(TransportRegistry& registry);

}  // namespace rdmaflow::rdma::ibverbs

#endif  // RDMAFLOW_RDMA_IBVERBS_IBVERBS_TRANSPORT_H_
