#include "rdma/ucx/peer_liveness.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace rdmaflow::rdma::ucx {
namespace {

// PID_MAX_LIMIT on 64-bit Linux.
constexpr uint32_t kMaxPid = 4194304;

// Field offsets of the encoding (host byte order: same host or not, the
// fields are only compared on the host that wrote them).
constexpr size_t kPidAt = 0;
constexpr size_t kStartAt = 4;
constexpr size_t kBootAt = 12;
constexpr size_t kPidNsAt = kBootAt + ProcessIdentity::kBootIdSize;
static_assert(kPidNsAt + 16 == ProcessIdentity::kEncodedSize);

bool IsBlank(absl::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return c == ' '; });
}

// A boot id as the kernel prints it: 8-4-4-4-12 lower-case hex digits.
bool IsUuid(absl::string_view text) {
  if (text.size() != ProcessIdentity::kBootIdSize) return false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (c != '-') return false;
    } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return false;
    }
  }
  return true;
}

// The boot id, or blanks when unreadable or malformed.
std::string ReadBootId() {
  std::ifstream file("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(file, id);
  if (!IsUuid(id)) return std::string(ProcessIdentity::kBootIdSize, ' ');
  return id;
}

// PF_EXITING in a task's flags (include/linux/sched.h): set as the task
// starts to exit, before it closes its files or unmaps its memory.
constexpr uint64_t kExitingFlag = 0x4;

struct StatFields {
  char state = '?';
  uint64_t flags = 0;
  uint64_t start_time = 0;
};

// The fields of a /proc/<pid>/stat line we use; nullopt when malformed.
std::optional<StatFields> ParseStat(absl::string_view line) {
  // The command name (field 2) is in parentheses and may hold spaces.
  const size_t close = line.rfind(')');
  if (close == absl::string_view::npos || close + 2 > line.size()) {
    return std::nullopt;
  }
  std::vector<absl::string_view> fields =
      absl::StrSplit(line.substr(close + 2), ' ', absl::SkipEmpty());
  // After the name: field 3 is the state, 9 the flags, 22 the start time.
  if (fields.size() < 20 || fields[0].empty()) return std::nullopt;
  StatFields parsed;
  parsed.state = fields[0][0];
  if (!absl::SimpleAtoi(fields[6], &parsed.flags) ||
      !absl::SimpleAtoi(fields[19], &parsed.start_time)) {
    return std::nullopt;
  }
  return parsed;
}

// The fields of a /proc/<pid>/stat file; nullopt if it cannot be read (no
// such process) or is malformed.
std::optional<StatFields> ReadStat(const std::string& path) {
  std::ifstream file(path);
  std::string line;
  if (!std::getline(file, line)) return std::nullopt;
  return ParseStat(line);
}

// Whether a process whose stat reads `stat` is not (or no longer) the one
// started at `start_time`: unreadable, a zombie, exiting, or another one.
bool IsGone(const std::optional<StatFields>& stat, uint64_t start_time) {
  return !stat.has_value() || stat->state == 'Z' || stat->state == 'X' ||
         (stat->flags & kExitingFlag) != 0 || stat->start_time != start_time;
}

NamespaceId ReadPidNamespace() {
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) != 0) return {};
  return NamespaceId{static_cast<uint64_t>(st.st_dev),
                     static_cast<uint64_t>(st.st_ino)};
}

// True when the /proc mounted here belongs to our own PID namespace, i.e.
// /proc/<getpid()> is us. Not so after `unshare --pid --fork` without
// --mount-proc, where /proc still numbers processes as the parent namespace
// does (and our pid 1 there is the host's init).
bool ProcIsOurs() {
  char target[32] = {0};
  const ssize_t n = readlink("/proc/self", target, sizeof(target) - 1);
  uint32_t pid = 0;
  return n > 0 && absl::SimpleAtoi(absl::string_view(target, n), &pid) &&
         pid == static_cast<uint32_t>(getpid());
}

void PutU64(std::string& out, size_t at, uint64_t v) {
  std::memcpy(out.data() + at, &v, 8);
}
template <typename T>
T Get(absl::string_view bytes, size_t at) {
  T v;
  std::memcpy(&v, bytes.data() + at, sizeof(T));
  return v;
}

}  // namespace

std::string ProcessIdentity::Encode() const {
  std::string out(kEncodedSize, '\0');
  std::memcpy(out.data() + kPidAt, &pid, 4);
  PutU64(out, kStartAt, start_time);
  std::string boot = boot_id;
  boot.resize(kBootIdSize, ' ');
  std::memcpy(out.data() + kBootAt, boot.data(), kBootIdSize);
  PutU64(out, kPidNsAt, pid_namespace.device);
  PutU64(out, kPidNsAt + 8, pid_namespace.inode);
  return out;
}

absl::StatusOr<ProcessIdentity> ProcessIdentity::Decode(
    absl::string_view bytes) {
  if (bytes.size() != kEncodedSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "malformed process identity: ", bytes.size(), " bytes, expected ",
        kEncodedSize, "; do all ranks run the same rdmaflow build?"));
  }
  ProcessIdentity identity;
  identity.pid = Get<uint32_t>(bytes, kPidAt);
  identity.start_time = Get<uint64_t>(bytes, kStartAt);
  identity.boot_id = std::string(bytes.substr(kBootAt, kBootIdSize));
  identity.pid_namespace = {Get<uint64_t>(bytes, kPidNsAt),
                            Get<uint64_t>(bytes, kPidNsAt + 8)};
  if (identity.pid == 0 || identity.pid > kMaxPid) {
    return absl::InvalidArgumentError(absl::StrCat(
        "malformed process identity: pid ", identity.pid, " is out of range"));
  }
  if (!IsUuid(identity.boot_id) && !IsBlank(identity.boot_id)) {
    return absl::InvalidArgumentError(
        "malformed process identity: the boot id is not a UUID");
  }
  if (!identity.pid_namespace.known() && identity.pid_namespace.device != 0) {
    return absl::InvalidArgumentError(
        "malformed process identity: PID namespace with a device but no inode");
  }
  return identity;
}

ProcessIdentity SelfIdentity() {
  ProcessIdentity self;
  self.pid = static_cast<uint32_t>(getpid());
  const std::optional<StatFields> stat = ReadStat("/proc/self/stat");
  self.start_time = ProcIsOurs() && stat.has_value() ? stat->start_time : 0;
  self.boot_id = ReadBootId();
  self.pid_namespace = ReadPidNamespace();
  return self;
}

bool CanWatchProcess(const ProcessIdentity& self, const ProcessIdentity& peer) {
  return !IsBlank(self.boot_id) && self.boot_id == peer.boot_id &&
         self.pid_namespace.known() &&
         self.pid_namespace == peer.pid_namespace && self.start_time != 0 &&
         peer.start_time != 0;
}

bool StatSaysGone(absl::string_view stat_line, uint64_t start_time) {
  return IsGone(ParseStat(stat_line), start_time);
}

bool IsProcessGone(const ProcessIdentity& peer) {
  return IsGone(ReadStat(absl::StrCat("/proc/", peer.pid, "/stat")),
                peer.start_time);
}

}  // namespace rdmaflow::rdma::ucx
