// File: ibverbs_probe.cc
#include "rdma/ibverbs/ibverbs_probe.h"

#include <infiniband/verbs.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "rdma/ibverbs/device.h"
#include "rdma/ibverbs/verbs_raii.h"

namespace rdmaflow::rdma::ibverbs {

TransportProbeReport ProbeIbverbs() {
  TransportProbeReport report;
  int count = 0;
  DeviceList list(ibv_get_device_list(&count));
  std::vector<std::string> names;
  for (int i = 0; list != nullptr && i < count; ++i) {
    names.push_back(ibv_get_device_name(list.get()[i]));
  }
  list.reset();
  if (names.empty()) {
    report.found.push_back("no RDMA device");
    report.advice.push_back(
        "no RDMA device (ibv_get_device_list): with an InfiniBand or RoCE "
        "NIC, load its driver; for Soft-RoCE, `rdma link add rxe0 type rxe "
        "netdev <interface>`; without one, use the ucx transport");
    return report;
  }
  for (const std::string& name : names) {
    DeviceOptions options;
    options.device = name;
    absl::StatusOr<Device> device = OpenDevice(options);
    if (device.ok()) {
      report.usable = true;
      report.found.push_back(absl::StrCat(
          device->description, ", ", device->device_attr.phys_port_cnt,
          device->device_attr.phys_port_cnt == 1 ? " port" : " ports"));
    } else {
      report.found.push_back(
          absl::StrCat(name, ": ", device.status().message()));
    }
  }
  if (!report.usable) {
    report.advice.push_back(
        "no RDMA device has an active port: check the links (ibv_devinfo, "
        "`rdma link`)");
  }
  return report;
}

}  // namespace rdmaflow::rdma::ibverbs
