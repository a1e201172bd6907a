// File: run_info.cc
#include "results/run_info.h"

#include <unistd.h>

#include <climits>
#include <cstdint>
#include <string>

namespace rdmaflow::results {

RunInfo NewRunInfo(absl::string_view tool, absl::Time start) {
  RunInfo run;
  run.set_tool(std::string(tool));
  char host[HOST_NAME_MAX + 1] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) run.set_host(host);
  const int64_t seconds = absl::ToUnixSeconds(start);  // rounds down
  run.mutable_start_time()->set_seconds(seconds);
  run.mutable_start_time()->set_nanos(static_cast<int32_t>(
      absl::ToInt64Nanoseconds(start - absl::FromUnixSeconds(seconds))));
  return run;
}

}  // namespace rdmaflow::results
