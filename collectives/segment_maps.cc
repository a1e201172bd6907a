// File: segment_maps.cc
#include "collectives/segment_maps.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "collectives/shared_segments.h"
#include "common/unique_fd.h"

namespace rdmaflow::collectives {

SegmentMaps::SegmentMaps(size_t capacity, size_t max_bytes)
    : capacity_(std::max<size_t>(capacity, 1)), max_bytes_(max_bytes) {}

SegmentMaps::~SegmentMaps() {
  for (const Mapping& mapping : mappings_) {
    munmap(const_cast<std::byte*>(mapping.data), mapping.size);
  }
}

absl::StatusOr<absl::Span<const std::byte>> SegmentMaps::Map(int64_t pid, int64_t fd,
                                                              uint64_t token,
                                                              absl::string_view who,
                                                              uint64_t epoch) {
  for (Mapping& mapping : mappings_) {
    if (mapping.pid == pid && mapping.token == token) {
      mapping.used = ++use_;
      mapping.epoch = epoch;
      ++stats_.hits;
      return absl::Span<const std::byte>(mapping.data, mapping.size);
    }
  }
  ++stats_.refused;  // undone on success
  const std::string segment = SegmentName(token);
  if (pid <= 0 || pid > INT_MAX || fd < 0 || fd > INT_MAX) {
    return absl::DataLossError(absl::StrCat(who, " published descriptor ", fd, " of process ",
                                            pid, " for its segment ", segment,
                                            ": a forged or corrupted word"));
  }
  const std::string path = absl::StrCat("/proc/", pid, "/fd/", fd);
  // Never blocks (a FIFO no one writes) nor takes a terminal; anything but
  // a plain shared-memory file is refused below.
  UniqueFd opened(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (opened.get() < 0) {
    const int error = errno;
    return absl::UnavailableError(absl::StrCat(
        who, ": cannot open its segment ", segment, " as ", path, ": ", std::strerror(error),
        " (errno ", error, "; EACCES/EPERM: the ptrace policy, ENOENT: gone)"));
  }
  // What we opened, by our own descriptor: the peer may have replaced its
  // descriptor since it published the number.
  char link[256];
  const std::string self = absl::StrCat("/proc/self/fd/", opened.get());
  const ssize_t length = readlink(self.c_str(), link, sizeof(link));
  const std::string expected = absl::StrCat("/memfd:", segment, " (deleted)");
  if (length < 0 || std::string(link, static_cast<size_t>(length)) != expected) {
    return absl::DataLossError(absl::StrCat(
        who, ": descriptor ", fd, " of process ", pid, " is '",
        absl::CHexEscape(length < 0 ? std::string() : std::string(link, length)),
        "', not its published segment ", segment, ": a forged or stale word"));
  }
  const int seals = fcntl(opened.get(), F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return absl::DataLossError(absl::StrCat(
        who, ": its segment ", segment, " is not sealed against shrinking, so reading it could "
        "fault when it shrinks: refused"));
  }
  // tmpfs, not hugetlbfs: a hugetlb file's holes fault with SIGBUS when no
  // huge page is left.
  struct statfs filesystem;
  struct stat status;
  if (fstatfs(opened.get(), &filesystem) != 0 || filesystem.f_type != TMPFS_MAGIC ||
      fstat(opened.get(), &status) != 0 || !S_ISREG(status.st_mode)) {
    return absl::DataLossError(absl::StrCat(who, ": its segment ", segment,
                                            " is not a shared-memory file: refused"));
  }
  if (status.st_size <= 0 || static_cast<uint64_t>(status.st_size) > kMaxSegmentBytes) {
    return absl::DataLossError(absl::StrCat(who, ": its segment ", segment, " holds ",
                                            status.st_size, " bytes, outside 1..",
                                            kMaxSegmentBytes, ": refused"));
  }
  const auto size = static_cast<size_t>(status.st_size);
  // Not populated: only the pages a call reads are faulted in (a peer's
  // segment may be large and mostly holes).
  void* data = mmap(nullptr, size, PROT_READ, MAP_SHARED, opened.get(), 0);
  if (data == MAP_FAILED) {
    const int error = errno;
    return absl::UnavailableError(absl::StrCat(who, ": cannot map its segment ", segment, " (",
                                               size, " bytes): ", std::strerror(error)));
  }
  --stats_.refused;
  ++stats_.mapped;
  mappings_.push_back(
      Mapping{pid, token, static_cast<const std::byte*>(data), size, ++use_, epoch});
  mapped_bytes_ += size;
  // Past the bounds, the least recently used mapping goes, but never one
  // returned in this epoch (its pointer is still in use).
  while (mappings_.size() > capacity_ || mapped_bytes_ > max_bytes_) {
    auto oldest = mappings_.end();
    for (auto it = mappings_.begin(); it != mappings_.end(); ++it) {
      if (it->epoch != epoch && (oldest == mappings_.end() || it->used < oldest->used)) {
        oldest = it;
      }
    }
    if (oldest == mappings_.end()) break;  // all in use: over the bounds until later
    munmap(const_cast<std::byte*>(oldest->data), oldest->size);
    mapped_bytes_ -= oldest->size;
    mappings_.erase(oldest);
    ++stats_.evicted;
  }
  return absl::Span<const std::byte>(static_cast<const std::byte*>(data), size);
}

}  // namespace rdmaflow::collectives
