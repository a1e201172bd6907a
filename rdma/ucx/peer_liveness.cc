#include "rdma/ucx/peer_liveness.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace rdmaflow::rdma::ucx {
namespace {

std::string ReadBootId() {
  std::ifstream file("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(file, id);
  id.resize(36, ' ');
  return id;
}

// State letter and start time of `pid`, from /proc/<pid>/stat; false if the
// process does not exist.
bool ReadStat(uint32_t pid, char* state, uint64_t* start_time) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(file, line)) return false;
  // The command name (field 2) is in parentheses and may hold spaces.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::vector<std::string> fields =
      absl::StrSplit(line.substr(close + 2), ' ', absl::SkipEmpty());
  // After the name: field 3 is the state, field 22 the start time.
  if (fields.size() < 20) return false;
  *state = fields[0].empty() ? '?' : fields[0][0];
  return absl::SimpleAtoi(fields[19], start_time);
}

}  // namespace

std::string ProcessIdentity::Encode() const {
  std::string out(kEncodedSize, '\0');
  std::memcpy(out.data(), &pid, 4);
  std::memcpy(out.data() + 4, &start_time, 8);
  std::memcpy(out.data() + 12, boot_id.data(), std::min<size_t>(36, boot_id.size()));
  return out;
}

absl::StatusOr<ProcessIdentity> ProcessIdentity::Decode(
    absl::string_view bytes) {
  if (bytes.size() != kEncodedSize) {
    return absl::InvalidArgumentError("malformed process identity");
  }
  ProcessIdentity identity;
  std::memcpy(&identity.pid, bytes.data(), 4);
  std::memcpy(&identity.start_time, bytes.data() + 4, 8);
  identity.boot_id = std::string(bytes.substr(12, 36));
  return identity;
}

ProcessIdentity SelfIdentity() {
  ProcessIdentity self;
  self.pid = static_cast<uint32_t>(getpid());
  char state = '?';
  ReadStat(self.pid, &state, &self.start_time);
  self.boot_id = ReadBootId();
  return self;
}

bool IsProcessGone(const ProcessIdentity& peer) {
  static const std::string* const kBootId = new std::string(ReadBootId());
  if (peer.boot_id != *kBootId) return false;  // Another host: unknowable.
  char state = '?';
  uint64_t start_time = 0;
  if (!ReadStat(peer.pid, &state, &start_time)) return true;
  return state == 'Z' || state == 'X' || start_time != peer.start_time;
}

}  // namespace rdmaflow::rdma::ucx
