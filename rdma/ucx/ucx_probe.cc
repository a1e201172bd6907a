// File: ucx_probe.cc
#include "rdma/ucx/ucx_probe.h"

#include <ucp/api/ucp.h>
#include <uct/api/uct.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rdmaflow::rdma::ucx {
namespace {

// Transport name -> its devices, from every memory domain UCT can open.
std::map<std::string, std::set<std::string>> TransportDevices(
    std::vector<std::string>& problems) {
  std::map<std::string, std::set<std::string>> devices;
  uct_component_h* components = nullptr;
  unsigned num_components = 0;
  if (ucs_status_t s = uct_query_components(&components, &num_components);
      s != UCS_OK) {
    problems.push_back(
        absl::StrCat("uct_query_components: ", ucs_status_string(s)));
    return devices;
  }
  for (unsigned c = 0; c < num_components; ++c) {
    uct_component_attr_t attr{};
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                      UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
    if (uct_component_query(components[c], &attr) != UCS_OK) continue;
    std::vector<uct_md_resource_desc_t> mds(attr.md_resource_count);
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    attr.md_resources = mds.data();
    if (mds.empty() || uct_component_query(components[c], &attr) != UCS_OK) {
      continue;
    }
    for (const uct_md_resource_desc_t& md_resource : mds) {
      uct_md_config_t* config = nullptr;
      if (uct_md_config_read(components[c], nullptr, nullptr, &config) != UCS_OK) {
        continue;
      }
      uct_md_h md = nullptr;
      ucs_status_t s = uct_md_open(components[c], md_resource.md_name, config, &md);
      uct_config_release(config);
      if (s != UCS_OK) {
        problems.push_back(absl::StrCat("memory domain ", md_resource.md_name,
                                        ": ", ucs_status_string(s)));
        continue;
      }
      uct_tl_resource_desc_t* resources = nullptr;
      unsigned num_resources = 0;
      if (uct_md_query_tl_resources(md, &resources, &num_resources) == UCS_OK) {
        for (unsigned r = 0; r < num_resources; ++r) {
          devices[resources[r].tl_name].insert(resources[r].dev_name);
        }
        uct_release_tl_resource_list(resources);
      }
      uct_md_close(md);
    }
  }
  uct_release_component_list(components);
  return devices;
}

bool HasAny(const std::map<std::string, std::set<std::string>>& devices,
            const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    if (devices.count(name) > 0) return true;
  }
  return false;
}

}  // namespace

TransportProbeReport ProbeUcx() {
  TransportProbeReport report;
  report.found.push_back(absl::StrCat("UCX ", ucp_get_version_string()));
  std::vector<std::string> problems;
  const auto devices = TransportDevices(problems);
  for (const auto& [tl, names] : devices) {
    report.found.push_back(
        absl::StrCat("transport ", tl, ": ", absl::StrJoin(names, ", ")));
  }
  for (const std::string& problem : problems) report.found.push_back(problem);
  report.usable = !devices.empty();
  if (devices.empty()) {
    report.advice.push_back(
        "UCX lists no transport: check that libucx0 is installed and that "
        "UCX_TLS / UCX_NET_DEVICES do not exclude everything");
    return report;
  }
  // Same-host ranks: one-sided access needs a shared-memory transport, and
  // the all-reduce's direct access maps the peer's memory (posix/sysv).
  if (!HasAny(devices, {"posix", "sysv"})) {
    report.advice.push_back(
        "no shared-memory transport (posix, sysv): ranks on one host go "
        "through tcp, and same-host direct access (RDMAFLOW_DIRECT=auto) is "
        "unavailable; check /dev/shm");
  } else {
    report.found.push_back(
        "same-host direct access (ucp_rkey_ptr over posix/sysv): available");
  }
  if (!HasAny(devices, {"rc_verbs", "rc_mlx5", "ud_verbs", "ud_mlx5", "dc_mlx5"})) {
    report.advice.push_back(
        "no RDMA transport in UCX: across hosts it uses tcp. With an RDMA "
        "NIC, check its driver (ibv_devinfo) and that UCX's verbs module "
        "is installed");
  }
  if (!HasAny(devices, {"tcp"})) {
    report.advice.push_back(
        "no tcp transport: UCX has no path to another host without RDMA");
  }
  return report;
}

}  // namespace rdmaflow::rdma::ucx
