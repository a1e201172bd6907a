// File: device_copy.h
// -----------------------------------------------------------------------------
// What the device benchmarks share: waiting for a stream with a deadline,
// uploads and downloads through it, and the reference every device figure
// is set against, a copy between two buffers of one device on one stream
// (on the GPU: the HBM's bound, read and write; on the fake device, a host
// copy by its copy thread).
#ifndef RDMAFLOW_BENCH_DEVICE_COPY_H_
#define RDMAFLOW_BENCH_DEVICE_COPY_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device/device_runtime.h"

namespace rdmaflow::bench {

// Returns once everything enqueued on `stream` has run (an event recorded
// on it): kDeadlineExceeded naming `what` after a minute; the stream's error.
absl::Status DrainStream(device::Stream& stream, device::Event& event, const std::string& what);

// Copies `bytes` from `from` to `to` (host or device memory) and drains.
absl::Status CopyAndDrain(device::Stream& stream, device::Event& event, void* to,
                          const void* from, size_t bytes, const std::string& what);

// Seconds per copy of `bytes` from `from` to `to`: one warm-up copy, then
// `iterations` (> 0) back to back, timed from the first enqueue to the end
// of the last.
absl::StatusOr<double> DeviceCopySeconds(device::Stream& stream, device::Event& event, void* to,
                                         const void* from, size_t bytes, int iterations);

}  // namespace rdmaflow::bench

#endif  // RDMAFLOW_BENCH_DEVICE_COPY_H_
