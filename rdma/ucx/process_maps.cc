// File: process_maps.cc
#include "rdma/ucx/process_maps.h"

#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace rdmaflow::rdma::ucx {

bool InsideOneSharedMapping(absl::string_view maps, uintptr_t address, size_t bytes) {
  if (bytes == 0 || address > std::numeric_limits<uintptr_t>::max() - bytes) return false;
  const uintptr_t end = address + bytes;
  for (absl::string_view line : absl::StrSplit(maps, '\n')) {
    // "7f1c2a000000-7f1c2a041000 rw-s 00000000 00:01 1234 /dev/shm/..."
    const size_t space = line.find(' ');
    if (space == absl::string_view::npos) continue;
    const absl::string_view range = line.substr(0, space);
    const absl::string_view perms = line.substr(space + 1, 4);
    if (perms.size() != 4 || perms[3] != 's') continue;
    const size_t dash = range.find('-');
    if (dash == absl::string_view::npos) continue;
    uint64_t first = 0, last = 0;
    if (!absl::SimpleHexAtoi(range.substr(0, dash), &first) ||
        !absl::SimpleHexAtoi(range.substr(dash + 1), &last)) {
      continue;
    }
    if (first <= address && end <= last) return true;
  }
  return false;
}

bool InsideOwnSharedMapping(const void* address, size_t bytes) {
  std::ifstream file("/proc/self/maps");
  if (!file) return false;
  std::ostringstream text;
  text << file.rdbuf();
  return InsideOneSharedMapping(text.str(), reinterpret_cast<uintptr_t>(address), bytes);
}

}  // namespace rdmaflow::rdma::ucx
