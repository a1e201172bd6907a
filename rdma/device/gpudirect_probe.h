// File: gpudirect_probe.h
// -----------------------------------------------------------------------------
// Whether a host transport's NIC reaches a device's memory directly
// (GPUDirect RDMA, docs/device.md): a small device allocation is exported
// as a dma-buf (DeviceRuntime::ExportDmaBuf) and registered with the host
// transport (Transport::RegisterDmaBuf), then both are undone. Only the
// ibverbs backend registers dma-bufs, and only on a NIC whose driver takes
// them; nothing in this project's world has one, so the probe's success
// path is unverified here.
#ifndef RDMAFLOW_RDMA_DEVICE_GPUDIRECT_PROBE_H_
#define RDMAFLOW_RDMA_DEVICE_GPUDIRECT_PROBE_H_

#include "absl/status/status.h"
#include "device/device_runtime.h"
#include "rdma/transport.h"

namespace rdmaflow::rdma::device_path {

// OK when `host` registered `runtime`'s memory through a dma-buf; else why
// not, as the first refusal said it: kUnimplemented from a backend, NIC or
// driver without dma-buf support, or a runtime that exports none; another
// code when the probe itself failed (allocation, registration limits).
absl::Status ProbeGpuDirect(Transport& host, device::DeviceRuntime& runtime);

}  // namespace rdmaflow::rdma::device_path

#endif  // RDMAFLOW_RDMA_DEVICE_GPUDIRECT_PROBE_H_
