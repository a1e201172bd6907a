// File: pingpong_device.cc
#include "bench/pingpong_device.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/device_copy.h"
#include "common/status_macros.h"
#include "rdma/device/close_mappings.h"

namespace rdmaflow::bench {

absl::StatusOr<std::unique_ptr<DevicePingPong>> DevicePingPong::Create(
    std::unique_ptr<rdma::Transport> host, std::unique_ptr<device::DeviceRuntime> runtime,
    size_t max_bytes, const rdma::device_path::DeviceTransportOptions& options) {
  std::unique_ptr<DevicePingPong> out(new DevicePingPong());
  out->runtime_ = std::move(runtime);
  ASSIGN_OR_RETURN(out->transport_, rdma::device_path::DeviceTransport::Create(
                                        std::move(host), out->runtime_.get(), options));
  ASSIGN_OR_RETURN(out->stream_, out->runtime_->CreateStream());
  ASSIGN_OR_RETURN(out->done_, out->runtime_->CreateEvent());
  out->max_bytes_ = max_bytes;
  return out;
}

absl::Status DevicePingPong::CloseMappings(rdma::Store& store, absl::Time deadline) {
  return rdma::device_path::CloseMappingsTogether(*transport_, store, "pingpong", 2, deadline);
}

void DevicePingPong::Apply(PingPongOptions& options) {
  options.allocate = [this](size_t bytes) { return transport_->AllocateDevice(bytes); };
  options.fill = [this](rdma::MemoryRegion& region, unsigned char value) {
    return Fill(region, value);
  };
  options.reference = [this](size_t bytes, int iterations) {
    return CopyMbps(bytes, iterations);
  };
}

absl::Status DevicePingPong::Fill(rdma::MemoryRegion& region, unsigned char value) {
  const std::vector<unsigned char> host(region.size(), value);
  return CopyAndDrain(*stream_, *done_, region.data(), host.data(), host.size(),
                      "filling a device region");
}

absl::StatusOr<double> DevicePingPong::CopyMbps(size_t bytes, int iterations) {
  if (bytes > max_bytes_ || iterations <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a reference copy of ", bytes, " bytes x ", iterations, " (buffers of ", max_bytes_,
        " bytes)"));
  }
  // Allocated at the first call: only rank 0 measures the reference.
  if (to_.data() == nullptr) {
    ASSIGN_OR_RETURN(from_, runtime_->Allocate(max_bytes_));
    ASSIGN_OR_RETURN(to_, runtime_->Allocate(max_bytes_));
  }
  ASSIGN_OR_RETURN(const double seconds, DeviceCopySeconds(*stream_, *done_, to_.data(),
                                                           from_.data(), bytes, iterations));
  return static_cast<double>(bytes) / seconds / 1e6;
}

}  // namespace rdmaflow::bench
