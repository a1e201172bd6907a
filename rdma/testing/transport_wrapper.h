// File: testing/transport_wrapper.h
// -----------------------------------------------------------------------------
// TransportWrapper: a Transport that forwards every call to an inner one
// (leveldb's EnvWrapper). The test decorators (FaultyTransport, the
// strategies' SlowPeerTransport, the runtime's TrackingTransport,
// blocking_test's StallingTransport) derive from it and override only what
// they change.
//
// Thread-compatible, like the transport it wraps, which must outlive it.
#ifndef RDMAFLOW_RDMA_TESTING_TRANSPORT_WRAPPER_H_
#define RDMAFLOW_RDMA_TESTING_TRANSPORT_WRAPPER_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "rdma/endpoint.h"
#include "rdma/transport.h"

namespace rdmaflow::rdma::testing {

class TransportWrapper : public Transport {
 public:
  explicit TransportWrapper(Transport& inner) : inner_(inner) {}

  int rank() const override { return inner_.rank(); }
  Capabilities capabilities() const override { return inner_.capabilities(); }
  std::string address() const override { return inner_.address(); }
  absl::StatusOr<MemoryRegion> Allocate(size_t bytes) override {
    return inner_.Allocate(bytes);
  }
  absl::StatusOr<MemoryRegion> Register(absl::Span<std::byte> memory) override {
    return inner_.Register(memory);
  }
  absl::StatusOr<MemoryRegion> AllocateDevice(size_t bytes) override {
    return inner_.AllocateDevice(bytes);
  }
  absl::StatusOr<MemoryRegion> RegisterDmaBuf(const DmaBufSpan& span) override {
    return inner_.RegisterDmaBuf(span);
  }
  absl::StatusOr<std::unique_ptr<Endpoint>> Connect(const PeerInfo& peer) override {
    return inner_.Connect(peer);
  }
  absl::StatusOr<int> Progress() override { return inner_.Progress(); }
  std::optional<Notification> PollNotification() override {
    return inner_.PollNotification();
  }
  bool WaitForActivity(absl::Duration timeout) override {
    return inner_.WaitForActivity(timeout);
  }
  // The inner transport's waits are the ones WaitForActivity() sleeps in.
  // (AnnouncesActivity() stays false: a wrapper may hold work of its own,
  // a delayed completion, that no event of the inner transport announces.)
  void InterruptWait() override { inner_.InterruptWait(); }

 protected:
  Transport& inner() const { return inner_; }

 private:
  Transport& inner_;
};

}  // namespace rdmaflow::rdma::testing

#endif  // RDMAFLOW_RDMA_TESTING_TRANSPORT_WRAPPER_H_
