// File: link_presets.cc
#include "sim/link_presets.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rdmaflow::sim {
namespace {

LinkProfile Link(const char* name, double latency_us, double gbps,
                 double per_message_us, const char* source) {
  LinkProfile link;
  link.set_name(name);
  link.set_latency_us(latency_us);
  link.set_bandwidth_gbps(gbps);
  link.set_per_message_us(per_message_us);
  link.set_source(source);
  return link;
}

// rdmaflow over TCP is UCX over TCP: put and get run in software on the
// target (LinkProfile.needs_target_progress).
LinkProfile Tcp(LinkProfile link) {
  link.set_needs_target_progress(true);
  return link;
}

}  // namespace

std::vector<LinkProfile> LinkPresets() {
  // TCP goodput is about 94 % of the line rate (Ethernet, IP and TCP
  // headers at a 1500-byte MTU); RDMA figures are ib_write_bw peaks and
  // ib_write_lat medians as vendors and users publish them.
  return {
      Link("shm", 0.6, 10, 0.3,
           "default: UCX shared memory on a 2-core VM (calibrate to replace)"),
      Tcp(Link("100mbit", 60, 0.01175, 5,
               "typical: TCP over 100 Mbit/s Ethernet (94 Mbit/s goodput)")),
      Tcp(Link("1gbit", 30, 0.1175, 5,
               "typical: TCP over 1 Gbit/s Ethernet (940 Mbit/s goodput)")),
      Tcp(Link("10gbit", 15, 1.175, 3, "typical: TCP over 10 Gbit/s Ethernet")),
      Tcp(Link("25gbit", 12, 2.94, 2, "typical: TCP over 25 Gbit/s Ethernet")),
      Link("roce25", 1.6, 2.9, 0.1,
           "published: perftest ib_write_bw/ib_write_lat, RoCE v2 over 25 GbE"),
      Link("roce100", 1.8, 11.6, 0.05,
           "published: perftest ib_write_bw/ib_write_lat, RoCE v2 over 100 GbE"),
      Link("ib_edr100", 1.0, 12.08, 0.03,
           "published: perftest ib_write_bw 96.6 Gbit/s, ib_write_lat ~1 us, EDR x4"),
      Link("ib_hdr200", 0.9, 24.4, 0.02,
           "published: perftest ib_write_bw ~195 Gbit/s, ib_write_lat ~0.9 us, HDR x4"),
  };
}

absl::StatusOr<LinkProfile> FindLink(const Calibration& calibration,
                                     const std::string& name) {
  for (const LinkProfile& link : calibration.links()) {
    if (link.name() == name) return link;
  }
  std::vector<std::string> names;
  for (const LinkProfile& link : calibration.links()) names.push_back(link.name());
  for (const LinkProfile& link : LinkPresets()) {
    if (link.name() == name) return link;
    names.push_back(link.name());
  }
  return absl::NotFoundError(absl::StrCat("no link called '", name,
                                          "' (known: ", absl::StrJoin(names, ", "), ")"));
}

HostProfile HostOf(const Calibration& calibration) {
  HostProfile host = calibration.host_profile();
  if (host.cores() <= 0) host.set_cores(2);
  if (host.memcpy_gbps() <= 0) host.set_memcpy_gbps(10);
  if (host.reduce_gbps() <= 0) host.set_reduce_gbps(5);
  if (host.store_round_trip_us() <= 0) host.set_store_round_trip_us(50);
  if (host.group_setup_ms() <= 0) host.set_group_setup_ms(50);
  return host;
}

}  // namespace rdmaflow::sim
