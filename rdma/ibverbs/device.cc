// File: device.cc
#include "rdma/ibverbs/device.h"

#include <arpa/inet.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "rdma/ibverbs/ibverbs_status.h"

namespace rdmaflow::rdma::ibverbs {
namespace {

bool IsIpv4Mapped(const ibv_gid& gid) {
  for (int i = 0; i < 10; ++i) {
    if (gid.raw[i] != 0) return false;
  }
  return gid.raw[10] == 0xff && gid.raw[11] == 0xff;
}

bool IsZero(const ibv_gid& gid) {
  for (uint8_t b : gid.raw) {
    if (b != 0) return false;
  }
  return true;
}

// Whether GID `index` is RoCE v2, from sysfs (as perftest reads it:
// ibv_query_gid_ex crashes on some providers in rdma-core 44).
bool GidTypeIsRoceV2(const std::string& device, int port, int index) {
  std::ifstream in(absl::StrCat("/sys/class/infiniband/", device, "/ports/",
                                port, "/gid_attrs/types/", index));
  std::string type;
  std::getline(in, type);
  return type == "RoCE v2";
}

// The first active port of `context`, or 0.
int FirstActivePort(ibv_context* context, int num_ports) {
  for (int p = 1; p <= num_ports; ++p) {
    ibv_port_attr attr{};
    if (ibv_query_port(context, p, &attr) == 0 &&
        attr.state == IBV_PORT_ACTIVE) {
      return p;
    }
  }
  return 0;
}

absl::Status ChooseGid(Device& d, int requested) {
  const char* kind = "InfiniBand";
  if (requested >= 0) {
    if (requested >= d.port_attr.gid_tbl_len) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gid_index ", requested, " is outside ", d.name, " port ", d.port,
          "'s GID table of ", d.port_attr.gid_tbl_len, " entries"));
    }
    d.gid_index = requested;
    kind = "requested";
  } else if (d.roce) {
    int best = -1;
    int best_rank = 4;
    for (int i = 0; i < d.port_attr.gid_tbl_len; ++i) {
      ibv_gid gid{};
      if (ibv_query_gid(d.context.get(), d.port, i, &gid) != 0 ||
          IsZero(gid)) {
        continue;  // An empty slot.
      }
      int rank = GidTypeIsRoceV2(d.name, d.port, i)
                     ? (IsIpv4Mapped(gid) ? 0 : 1)
                     : 2;
      if (rank < best_rank) {
        best_rank = rank;
        best = i;
      }
    }
    if (best < 0) {
      return absl::UnavailableError(absl::StrCat(
          d.name, " port ", d.port,
          " has no usable GID; is an IP address configured on its netdev?"));
    }
    d.gid_index = best;
    kind = best_rank < 2 ? "RoCE v2" : "RoCE v1";
  } else {
    d.gid_index = 0;
  }
  if (int rc = ibv_query_gid(d.context.get(), d.port, d.gid_index, &d.gid);
      rc != 0) {
    return VerbsError(errno, absl::StrCat("ibv_query_gid(", d.name, " port ",
                                          d.port, ", index ", d.gid_index,
                                          ")"));
  }
  if (IsIpv4Mapped(d.gid)) {
    char text[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, d.gid.raw + 12, text, sizeof(text));
    d.gid_ipv4 = text;
  }
  d.description =
      absl::StrCat(d.name, " port ", d.port, ", ", kind, " GID ", d.gid_index,
                   " (", GidToString(d.gid), "), MTU ",
                   128 << d.port_attr.active_mtu);
  return absl::OkStatus();
}

}  // namespace

std::string GidToString(const ibv_gid& gid) {
  char text[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, gid.raw, text, sizeof(text));
  return text;
}

absl::StatusOr<Device> OpenDevice(const DeviceOptions& options) {
  int count = 0;
  DeviceList list(ibv_get_device_list(&count));
  if (list == nullptr || count == 0) {
    return absl::UnavailableError(
        "no RDMA device found (ibv_get_device_list): this machine has no "
        "InfiniBand/RoCE NIC or Soft-RoCE device; create one with `rdma link "
        "add rxe0 type rxe netdev <interface>`, or use the ucx transport");
  }
  std::vector<std::string> names;
  Device d;
  for (int i = 0; i < count; ++i) {
    const char* name = ibv_get_device_name(list.get()[i]);
    names.push_back(name);
    if (!options.device.empty() && options.device != name) continue;
    ContextPtr context(ibv_open_device(list.get()[i]));
    if (context == nullptr) {
      if (!options.device.empty()) {
        return VerbsError(errno, absl::StrCat("ibv_open_device(", name, ")"));
      }
      continue;
    }
    ibv_device_attr attr{};
    if (ibv_query_device(context.get(), &attr) != 0) continue;
    int port = options.port;
    if (port == 0) port = FirstActivePort(context.get(), attr.phys_port_cnt);
    if (port < 0 || port > attr.phys_port_cnt) {
      return absl::InvalidArgumentError(absl::StrCat(
          "port ", options.port, " does not exist on ", name, " (it has ",
          attr.phys_port_cnt, ")"));
    }
    if (port == 0) {
      if (!options.device.empty()) {
        return absl::UnavailableError(absl::StrCat(
            name, " has no active port; check the link (ibv_devinfo)"));
      }
      continue;
    }
    d.context = std::move(context);
    d.name = name;
    d.port = port;
    d.device_attr = attr;
    break;
  }
  if (d.context == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        options.device.empty() ? "no RDMA device with an active port"
                               : absl::StrCat("no RDMA device named '",
                                              options.device, "'"),
        "; devices: ", absl::StrJoin(names, ", ")));
  }
  if (ibv_query_port(d.context.get(), d.port, &d.port_attr) != 0) {
    return VerbsError(errno, absl::StrCat("ibv_query_port(", d.name, ")"));
  }
  if (d.port_attr.state != IBV_PORT_ACTIVE) {
    return absl::UnavailableError(absl::StrCat(
        d.name, " port ", d.port, " is not active; check the link"));
  }
  d.roce = d.port_attr.link_layer == IBV_LINK_LAYER_ETHERNET;
  RETURN_IF_ERROR(ChooseGid(d, options.gid_index));
  return d;
}

}  // namespace rdmaflow::rdma::ibverbs
