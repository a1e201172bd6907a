// File: run_info.h
// -----------------------------------------------------------------------------
// The metadata every result record starts with (results.proto `RunInfo`):
// the tool, the host that writes the record and the time it started.
#ifndef RDMAFLOW_RESULTS_RUN_INFO_H_
#define RDMAFLOW_RESULTS_RUN_INFO_H_

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "results/results.pb.h"

namespace rdmaflow::results {

// A RunInfo naming `tool`, this host (gethostname; empty if that fails) and
// `start` (absl::Now() taken when the run starts). The caller fills
// in transport, params, description and world_size.
RunInfo NewRunInfo(absl::string_view tool, absl::Time start);

}  // namespace rdmaflow::results

#endif  // RDMAFLOW_RESULTS_RUN_INFO_H_
