// File: link_presets.h
// -----------------------------------------------------------------------------
// Links the simulator knows without a calibration: shared memory, Ethernet
// (TCP) at 100 Mbit/s, 1, 10 and 25 Gbit/s, RoCE at 25 and 100 Gbit/s and
// InfiniBand EDR (100 Gbit/s) and HDR (200 Gbit/s), with typical published
// figures (docs/scale.md lists the sources). A calibration's measured link
// of the same name replaces the preset.
#ifndef RDMAFLOW_SIM_LINK_PRESETS_H_
#define RDMAFLOW_SIM_LINK_PRESETS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sim/sim.pb.h"

namespace rdmaflow::sim {

std::vector<LinkProfile> LinkPresets();

// The link called `name`: the calibration's if it measured one, else the
// preset. kNotFound listing every known name otherwise.
absl::StatusOr<LinkProfile> FindLink(const Calibration& calibration,
                                     const std::string& name);

// The calibration's host, or this machine's defaults where it has none
// (2 cores, 10 GB/s memcpy, 5 GB/s reduce, 50 us store round trip, 50 ms
// group set-up).
HostProfile HostOf(const Calibration& calibration);

}  // namespace rdmaflow::sim

#endif  // RDMAFLOW_SIM_LINK_PRESETS_H_
