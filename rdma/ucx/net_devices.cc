#include "rdma/ucx/net_devices.h"

#include <uct/api/uct.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace rdmaflow::rdma::ucx {
namespace {

constexpr char kTcpComponent[] = "tcp";

// Appends the network devices of `component`'s memory domains to `devices`.
void AddNetDevices(uct_component_h component,
                   std::vector<std::string>& devices) {
  uct_component_attr_t attr{};
  attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                    UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
  if (uct_component_query(component, &attr) != UCS_OK) return;
  if (std::string(attr.name) == kTcpComponent || attr.md_resource_count == 0) {
    return;
  }
  std::vector<uct_md_resource_desc_t> mds(attr.md_resource_count);
  attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
  attr.md_resources = mds.data();
  if (uct_component_query(component, &attr) != UCS_OK) return;
  for (const uct_md_resource_desc_t& md_resource : mds) {
    uct_md_config_t* config = nullptr;
    if (uct_md_config_read(component, nullptr, nullptr, &config) != UCS_OK) {
      continue;
    }
    uct_md_h md = nullptr;
    const ucs_status_t opened =
        uct_md_open(component, md_resource.md_name, config, &md);
    uct_config_release(config);
    if (opened != UCS_OK) continue;
    uct_tl_resource_desc_t* resources = nullptr;
    unsigned count = 0;
    if (uct_md_query_tl_resources(md, &resources, &count) == UCS_OK) {
      for (unsigned i = 0; i < count; ++i) {
        if (resources[i].dev_type != UCT_DEVICE_TYPE_NET) continue;
        std::string name = resources[i].dev_name;
        if (std::find(devices.begin(), devices.end(), name) == devices.end()) {
          devices.push_back(std::move(name));
        }
      }
      uct_release_tl_resource_list(resources);
    }
    uct_md_close(md);
  }
}

}  // namespace

std::string DefaultNetDevices() {
  // Enumerated once: opening every memory domain costs milliseconds, and the
  // devices do not change while the process runs.
  static const std::string* const kDevices = [] {
    std::vector<std::string> devices = {kLoopbackDevice};
    uct_component_h* components = nullptr;
    unsigned count = 0;
    if (uct_query_components(&components, &count) == UCS_OK) {
      for (unsigned i = 0; i < count; ++i)
        AddNetDevices(components[i], devices);
      uct_release_component_list(components);
    }
    return new std::string(absl::StrJoin(devices, ","));
  }();
  return *kDevices;
}

bool TlsList::Names(absl::string_view name) const {
  return std::find(names.begin(), names.end(), name) != names.end();
}

TlsList ParseTls(absl::string_view tls) {
  TlsList list;
  if (absl::ConsumePrefix(&tls, "^")) list.all_but = true;
  for (absl::string_view name : absl::StrSplit(tls, ',', absl::SkipEmpty())) {
    absl::ConsumePrefix(&name, "\\");
    absl::ConsumeSuffix(&name, ":aux");
    list.names.emplace_back(name);
  }
  return list;
}

bool OnlyTcp(const std::string& tls) {
  const TlsList list = ParseTls(tls);
  if (list.all_but || list.names.empty()) return false;
  for (const std::string& name : list.names) {
    if (name != kTcpComponent) return false;
  }
  return true;
}

bool MayUseTcp(const std::string& tls, const std::string& net_devices) {
  const TlsList list = ParseTls(tls);
  const bool names_tcp = list.Names(kTcpComponent) || list.Names("all");
  if (!tls.empty() && list.all_but == names_tcp) return false;
  for (absl::string_view device : absl::StrSplit(net_devices, ',', absl::SkipEmpty())) {
    if (device == "all" || device.find(':') == absl::string_view::npos) return true;
  }
  return net_devices.empty();
}

}  // namespace rdmaflow::rdma::ucx
