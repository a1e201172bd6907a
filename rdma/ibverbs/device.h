// File: device.h
// -----------------------------------------------------------------------------
// OpenDevice: picks and opens an RDMA device, port and GID.
//
// GID choice is the most common RoCE failure, so the default is explicit: on
// an Ethernet (RoCE) port, the first RoCE v2 GID holding an IPv4 address
// (::ffff:a.b.c.d), else the first RoCE v2 GID, else the first RoCE v1 GID;
// on InfiniBand, GID 0 (LIDs route within a subnet). `description` says which
// was chosen, and `gid_index` overrides it.
#ifndef RDMAFLOW_RDMA_IBVERBS_DEVICE_H_
#define RDMAFLOW_RDMA_IBVERBS_DEVICE_H_

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "rdma/ibverbs/verbs_raii.h"

namespace rdmaflow::rdma::ibverbs {

struct DeviceOptions {
  // Device name ("mlx5_0", "rxe0"); empty: the first with an active port.
  std::string device;
  // Port number; 0: the device's first active port.
  int port = 0;
  // GID table index; -1: chosen as the file comment says.
  int gid_index = -1;
};

// An opened device and the port and GID in use. Move-only.
struct Device {
  ContextPtr context;
  std::string name;
  uint8_t port = 1;
  ibv_port_attr port_attr{};
  ibv_device_attr device_attr{};
  int gid_index = 0;
  ibv_gid gid{};
  bool roce = false;   // Ethernet link layer: every packet carries a GRH.
  std::string description;  // "rxe0 port 1, RoCE v2 GID 1 (::ffff:10.0.0.1)"
  // The IPv4 address in the GID, when it holds one ("10.0.0.1"), else "".
  std::string gid_ipv4;
};

// kUnavailable when there is no device, no device of that name, or no active
// port (with what to check); kInvalidArgument for a port or GID index out of
// range.
absl::StatusOr<Device> OpenDevice(const DeviceOptions& options);

// "fe80::...:1" style text of a GID.
std::string GidToString(const ibv_gid& gid);

}  // namespace rdmaflow::rdma::ibverbs

#endif  // RDMAFLOW_RDMA_IBVERBS_DEVICE_H_
