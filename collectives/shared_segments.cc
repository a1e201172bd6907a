// File: shared_segments.cc
#include "collectives/shared_segments.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iterator>
#include <set>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rdmaflow::collectives {
namespace {

class Locked {
 public:
  explicit Locked(pthread_mutex_t& mutex) : mutex_(mutex) { pthread_mutex_lock(&mutex_); }
  ~Locked() { pthread_mutex_unlock(&mutex_); }
  Locked(const Locked&) = delete;
  Locked& operator=(const Locked&) = delete;

 private:
  pthread_mutex_t& mutex_;
};

size_t PageRounded(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return bytes > SIZE_MAX - page ? 0 : (bytes + page - 1) / page * page;
}

// Every live instance, for the fork handlers (registered once). Lock
// order: this mutex, then an instance's.
struct Instances {
  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  std::set<SharedSegments*> live;
};

// The handlers are SharedSegments' own (private), hence passed in.
Instances& Live(void (*prepare)(), void (*parent)(), void (*child)()) {
  static Instances* instances = [&] {
    auto* made = new Instances;
    pthread_atfork(prepare, parent, child);
    return made;
  }();
  return *instances;
}

}  // namespace

std::string SegmentName(uint64_t token) {
  return absl::StrFormat("rdmaflow-segment-%016x", token);
}

SharedSegments& SharedSegments::Process() {
  static auto* process = new SharedSegments(kPoolBytes);
  return *process;
}

SharedSegments::SharedSegments(size_t pool_bytes) : pool_bytes_(pool_bytes) {
  Instances& instances = Live(&PrepareFork, &ParentAfterFork, &ChildAfterFork);
  Locked locked(instances.mutex);
  instances.live.insert(this);
}

SharedSegments::~SharedSegments() {
  {
    Instances& instances = Live(&PrepareFork, &ParentAfterFork, &ChildAfterFork);
    Locked locked(instances.mutex);
    instances.live.erase(this);
  }
  Locked locked(mutex_);
  while (!segments_.empty()) Destroy(segments_.begin());
}

void SharedSegments::PrepareFork() {
  Instances& instances = Live(&PrepareFork, &ParentAfterFork, &ChildAfterFork);
  pthread_mutex_lock(&instances.mutex);
  for (SharedSegments* segments : instances.live) {
    pthread_mutex_lock(&segments->mutex_);
    for (auto& [base, segment] : segments->segments_) {
      if (segment.in_use) segment.shared_with_child = true;
    }
  }
}

void SharedSegments::ParentAfterFork() {
  Instances& instances = Live(&PrepareFork, &ParentAfterFork, &ChildAfterFork);
  for (SharedSegments* segments : instances.live) pthread_mutex_unlock(&segments->mutex_);
  pthread_mutex_unlock(&instances.mutex);
}

void SharedSegments::ChildAfterFork() {
  Instances& instances = Live(&PrepareFork, &ParentAfterFork, &ChildAfterFork);
  for (SharedSegments* segments : instances.live) {
    segments->forked_ = true;
    pthread_mutex_unlock(&segments->mutex_);
  }
  pthread_mutex_unlock(&instances.mutex);
}

void SharedSegments::AdoptAfterFork() {
  if (!forked_) return;
  forked_ = false;
  // The pool is shared with the parent, which may hand it out again:
  // never ours to reuse. What the child still holds it frees unpooled.
  while (!pool_.empty()) {
    const auto it = segments_.find(pool_.begin()->second);
    pool_.erase(pool_.begin());
    if (it != segments_.end()) Destroy(it);
  }
  for (auto& [base, segment] : segments_) {
    segment.inherited = true;
    segment.shared_with_child = false;
  }
  stats_ = {};
}

void SharedSegments::Destroy(std::map<uintptr_t, Segment>::iterator it) {
  munmap(reinterpret_cast<void*>(it->first), it->second.size);
  close(it->second.fd);
  segments_.erase(it);
}

absl::StatusOr<std::byte*> SharedSegments::Allocate(size_t bytes) {
  const size_t size = PageRounded(bytes);
  if (bytes == 0 || size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared segments: cannot allocate ", bytes, " bytes"));
  }
  Locked locked(mutex_);
  AdoptAfterFork();
  // A pooled segment of at least the size, and at most a quarter more.
  const auto fit = pool_.lower_bound(size);
  if (fit != pool_.end() && fit->first - size <= size / 4) {
    const uintptr_t base = fit->second;
    pool_.erase(fit);
    Segment& segment = segments_.at(base);
    segment.in_use = true;
    stats_.pooled_bytes -= static_cast<int64_t>(segment.size);
    stats_.live_bytes += static_cast<int64_t>(segment.size);
    ++stats_.reused;
    return reinterpret_cast<std::byte*>(base);
  }
  uint64_t token = 0;
  while (token == 0) {
    absl::BitGen random;
    token = absl::Uniform<uint64_t>(random);
  }
  auto failed = [&](const char* what) {
    const int error = errno;
    const char* check = error == EMFILE || error == ENFILE
                            ? "the limit on open files (ulimit -n): each segment holds one"
                            : "the memory limits (ulimit -v, the cgroup's)";
    return absl::ResourceExhaustedError(absl::StrCat("shared segments: ", what, " for ", size,
                                                     " bytes failed: ", std::strerror(error),
                                                     " (errno ", error, "); check ", check));
  };
  const int fd = memfd_create(SegmentName(token).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return failed("memfd_create");
  if (ftruncate(fd, static_cast<off_t>(size)) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    absl::Status status = failed("sizing and sealing a memfd");
    close(fd);
    return status;
  }
  void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    absl::Status status = failed("mmap of a memfd");
    close(fd);
    return status;
  }
  segments_[reinterpret_cast<uintptr_t>(data)] = Segment{size, fd, token, true, false};
  ++stats_.segments;
  stats_.live_bytes += static_cast<int64_t>(size);
  return static_cast<std::byte*>(data);
}

bool SharedSegments::Release(std::byte* data) {
  Locked locked(mutex_);
  AdoptAfterFork();
  const auto it = segments_.find(reinterpret_cast<uintptr_t>(data));
  if (it == segments_.end() || !it->second.in_use) return false;
  Segment& segment = it->second;
  segment.in_use = false;
  if (segment.inherited) {
    Destroy(it);
    return true;
  }
  stats_.live_bytes -= static_cast<int64_t>(segment.size);
  if (segment.shared_with_child ||
      static_cast<size_t>(stats_.pooled_bytes) + segment.size > pool_bytes_) {
    Destroy(it);
    return true;
  }
  pool_.emplace(segment.size, it->first);
  stats_.pooled_bytes += static_cast<int64_t>(segment.size);
  return true;
}

std::optional<SegmentRef> SharedSegments::Find(const std::byte* data, size_t bytes) {
  const auto at = reinterpret_cast<uintptr_t>(data);
  Locked locked(mutex_);
  AdoptAfterFork();
  auto it = segments_.upper_bound(at);
  if (it == segments_.begin()) return std::nullopt;
  --it;
  const Segment& segment = it->second;
  const size_t offset = at - it->first;
  if (!segment.in_use || segment.inherited || offset >= segment.size ||
      bytes > segment.size - offset) {
    return std::nullopt;
  }
  return SegmentRef{segment.fd, segment.token, offset};
}

SharedSegmentsStats SharedSegments::stats() {
  Locked locked(mutex_);
  AdoptAfterFork();
  return stats_;
}

}  // namespace rdmaflow::collectives
