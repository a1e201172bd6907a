// File: device_data_mover.h
// -----------------------------------------------------------------------------
// DeviceDataMover: a direct-access collective's bytes in device memory
// (collectives/data_mover.h). HostAllReduce with this mover is the same-host
// device all-reduce: every member's data region is a device region of a
// DeviceTransport (AllocateDevice, or a tensor's memory through
// RegisterDevice), the peers' regions are mapped by IPC
// (DeviceTransport::MapDevice), and each read of a peer's range is one
// reduce launch over all sources on this mover's own stream; the control
// words stay in host memory, where the host polls them. A word that says
// "these bytes are there" is published only after an event on that stream
// completed (or, where its Record was refused, the stream went idle).
//
//   ASSIGN_OR_RETURN(auto mover, DeviceDataMover::Create(*device_transport));
//   HostAllReduceOptions options;
//   options.mover = mover.get();
//   options.chunk_bytes = 4 << 20;  // an event per chunk: keep chunks large
//   ASSIGN_OR_RETURN(rdma::MemoryRegion data, device_transport->AllocateDevice(bytes));
//   ASSIGN_OR_RETURN(auto allreduce, HostAllReduce::Create(
//       *device_transport, store, "job", members, data, options));
//
// Reductions take what the device's reduce launch takes (float32, float16,
// bfloat16; sum, max): other calls are refused on every member alike.
// Thread-compatible.
#ifndef RDMAFLOW_COLLECTIVES_DEVICE_DATA_MOVER_H_
#define RDMAFLOW_COLLECTIVES_DEVICE_DATA_MOVER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/data_mover.h"
#include "device/device_runtime.h"
#include "device/event_pool.h"
#include "device/queued_work.h"
#include "rdma/device/device_transport.h"

namespace rdmaflow::collectives {

class DeviceDataMover final : public DataMover {
 public:
  // `transport` must outlive the mover; the runtime's stream and event
  // errors.
  static absl::StatusOr<std::unique_ptr<DeviceDataMover>> Create(
      rdma::device_path::DeviceTransport& transport);
  // Waits (bounded) for its stream before freeing the scratch memory.
  ~DeviceDataMover() override;

  const char* kind() const override { return "device"; }
  std::string Describe() const override;
  absl::Status Supports(DataType type, ReduceOp op) const override;
  absl::StatusOr<std::byte*> MapPeer(rdma::Endpoint& endpoint,
                                     const rdma::RemoteSlice& remote) override;
  absl::StatusOr<std::byte*> Scratch(size_t bytes) override;
  absl::Status Copy(std::byte* dst, const std::byte* src, size_t bytes) override;
  absl::Status Reduce(DataType type, ReduceOp op, std::byte* dst,
                      const std::vector<const std::byte*>& srcs, size_t count) override;
  // An event recorded after the work queued so far. Where its Record is
  // refused (or no event could be made), the work is watched through a
  // device::QueuedWork (the Record tried again at each Reached(), or else
  // the stream idle): a refused Record costs only time, never an error
  // nor a mark reached before its work ended.
  absl::StatusOr<uint64_t> Mark() override;
  absl::StatusOr<bool> Reached(uint64_t mark) override;
  // A Mark(), then Reached() polled: at once a few times (a device's short
  // kernels end within microseconds), then with sleeps of 2 us doubling.
  absl::Status Fence(absl::Time deadline, const std::string& what) override;

 private:
  struct Pending {
    uint64_t mark = 0;
    device::QueuedWork work;  // the work before the mark
  };

  DeviceDataMover(rdma::device_path::DeviceTransport& transport,
                  std::unique_ptr<device::Stream> stream)
      : transport_(transport), stream_(std::move(stream)), events_(transport.runtime()) {}

  rdma::device_path::DeviceTransport& transport_;
  std::unique_ptr<device::Stream> stream_;
  // Marks made and not yet seen reached, oldest first; their events return
  // to `events_` once reached (one whose Record failed never does). After
  // `stream_`, which their QueuedWorks use: they go first.
  std::deque<Pending> pending_;
  device::EventPool events_;
  uint64_t marks_ = 0;
  uint64_t reached_ = 0;
  device::DeviceMemory scratch_;
};

}  // namespace rdmaflow::collectives

#endif  // RDMAFLOW_COLLECTIVES_DEVICE_DATA_MOVER_H_
