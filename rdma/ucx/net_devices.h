// File: net_devices.h
// -----------------------------------------------------------------------------
// Which network devices the UCX backend uses (UCX's NET_DEVICES). TCP uses
// only the loopback interface unless told otherwise, so that tests and
// single-host jobs never depend on, or wait for, another interface (UCX 1.13
// otherwise spreads TCP lanes over every interface that is up). RDMA ports
// (InfiniBand, RoCE) stay available by default.
#ifndef RDMAFLOW_RDMA_UCX_NET_DEVICES_H_
#define RDMAFLOW_RDMA_UCX_NET_DEVICES_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace rdmaflow::rdma::ucx {

// The loopback interface's name.
inline constexpr char kLoopbackDevice[] = "lo";

// The value for UCX's NET_DEVICES when neither the `net_devices` option nor
// UCX_NET_DEVICES says otherwise: "lo" plus every network device of UCX's
// other (non-TCP) transports, e.g. "lo,mlx5_0:1". Thread-safe; enumerated
// once per process.
std::string DefaultNetDevices();

// UCX's TLS setting as UCX 1.13 reads it: "^a,b" is every transport but a
// and b (`all_but`); a name may carry a leading backslash (the transport
// of that name, not an alias) or a ":aux" suffix (for wireup only: still
// opened), which `names` drop ("tcp:aux" -> "tcp").
struct TlsList {
  bool all_but = false;
  std::vector<std::string> names;
  bool Names(absl::string_view name) const;
};
TlsList ParseTls(absl::string_view tls);

// Whether UCX may open its TCP transport under UCX's TLS `tls` and
// NET_DEVICES `net_devices` (each as UCX reads it; empty: UCX's default,
// all): `tls` empty, "all", a list naming "tcp", or an exclusion ("^...")
// that does not; and `net_devices` empty, "all", or naming a network
// interface (a name without a port, "eth0"; "mlx5_0:1" is an RDMA port).
// For settings of TCP's own, which UCX warns about where no transport
// takes them.
bool MayUseTcp(const std::string& tls, const std::string& net_devices);

// Whether UCX's TLS `tls` (as above) opens TCP and nothing else: a list of
// "tcp" alone (with or without a backslash or ":aux"). Where it does, every
// operation's progress is a socket's, which the worker's event file
// descriptor announces (UcxTransport::AnnouncesActivity).
bool OnlyTcp(const std::string& tls);

}  // namespace rdmaflow::rdma::ucx

#endif  // RDMAFLOW_RDMA_UCX_NET_DEVICES_H_
