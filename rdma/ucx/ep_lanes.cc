// File: ep_lanes.cc
#include "rdma/ucx/ep_lanes.h"

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace rdmaflow::rdma::ucx {

bool OneTcpLane(absl::string_view ep_info) {
  int lanes = 0;
  bool tcp = false;
  for (absl::string_view line : absl::StrSplit(ep_info, '\n')) {
    const size_t at = line.find("lane[");
    if (at == absl::string_view::npos) continue;
    ++lanes;
    // "lane[0]:  0:tcp/eth0.0 md[0] ...": the resource after "<index>:".
    absl::string_view rest = line.substr(at);
    const size_t colon = rest.find(':');
    if (colon == absl::string_view::npos) return false;
    rest = absl::StripLeadingAsciiWhitespace(rest.substr(colon + 1));
    const size_t index_end = rest.find(':');
    if (index_end == absl::string_view::npos) return false;  // "cm tcp", ...
    const absl::string_view index = rest.substr(0, index_end);
    if (index.empty() || !absl::c_all_of(index, absl::ascii_isdigit)) return false;
    tcp = absl::StartsWith(rest.substr(index_end + 1), "tcp/");
  }
  return lanes == 1 && tcp;
}

bool TcpLaneOrdersPuts(unsigned major, unsigned minor) { return major == 1 && minor == 13; }

}  // namespace rdmaflow::rdma::ucx
