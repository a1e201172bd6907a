#include "device/fake/fake_device.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <thread>
#include <utility>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "device/fake/fake_stream.h"

namespace rdmaflow::device {
namespace {

// The layout of a fake IPC handle (64 bytes, like cudaIpcMemHandle_t).
constexpr char kMagic[8] = {'R', 'F', 'F', 'A', 'K', 'E', 'I', 'P'};
constexpr size_t kNameOffset = 24;
constexpr size_t kNameBytes = IpcHandle::kBytes - kNameOffset;  // NUL included
constexpr char kNamePrefix[] = "/rdmaflow-fake-";
struct HandleHeader {
  char magic[8];
  int32_t pid;
  int32_t device;
  uint64_t size;
};
static_assert(sizeof(HandleHeader) == kNameOffset);

// Maps the shared-memory object `fd` of `size` bytes.
absl::StatusOr<void*> Map(int fd, size_t size, const std::string& name) {
  void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    return absl::ErrnoToStatus(errno, absl::StrCat("fake device: mapping ", size, " bytes of ",
                                                   name));
  }
  return data;
}

std::atomic<int64_t> freed_while_open_count{0};
constexpr absl::Duration kLockTimeout = absl::Seconds(5);

// Before an exported allocation's object is unlinked: whether a process
// that opened it through an IPC handle still has it (its share lock,
// FakeDevice::Block::importer), said on stderr and counted if so.
void CheckNoImporter(const std::string& name, size_t size) {
  UniqueFd fd(shm_open(name.c_str(), O_RDWR, 0));
  if (fd.get() < 0) return;
  if (flock(fd.get(), LOCK_EX | LOCK_NB) == 0 || errno != EWOULDBLOCK) return;
  freed_while_open_count.fetch_add(1);
  std::fprintf(stderr,
               "fake device: freeing the %zu-byte allocation %s %s through an IPC handle "
               "(undefined with CUDA: every importer closes its mapping, then the exporter "
               "frees; DeviceTransport::CloseMappings and a barrier)\n",
               size, name.c_str(), FakeDevice::kFreedWhileOpen);
}

// The share lock an importer holds while mapped. An exporter checking for
// importers holds the exclusive one for an instant: tried again until
// kLockTimeout.
absl::Status LockShared(int fd, const std::string& name) {
  const absl::Time deadline = absl::Now() + kLockTimeout;
  while (flock(fd, LOCK_SH | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      return absl::ErrnoToStatus(errno, absl::StrCat("fake device: locking IPC handle ", name));
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "fake device: IPC handle ", name, " stayed locked by its exporter for ",
          absl::FormatDuration(kLockTimeout)));
    }
    std::this_thread::yield();
  }
  return absl::OkStatus();
}

}  // namespace

int64_t FakeDevice::frees_while_open() { return freed_while_open_count.load(); }

absl::StatusOr<std::unique_ptr<FakeDevice>> FakeDevice::Create(const FakeDeviceOptions& options) {
  if (options.device < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("fake device: ordinal ", options.device, " is negative"));
  }
  if (options.fail_operation < 0 || options.refuse_operation < 0) {
    return absl::InvalidArgumentError(
        "fake device: fail_operation and refuse_operation must not be negative");
  }
  return std::unique_ptr<FakeDevice>(new FakeDevice(options));
}

FakeDevice::~FakeDevice() {
  // Memory the program never freed: CUDA keeps it until the process ends
  // (a runtime going away frees nothing), so a peer that still maps it saw
  // no free, and none is counted. Released here for the host's sake (an
  // importer's mapping of the object stays valid).
  absl::MutexLock lock(&mu_);
  for (auto& [data, block] : blocks_) {
    std::fprintf(stderr, "fake device: %zu bytes at %p outlived the runtime; released now\n",
                 block.size, static_cast<const void*>(data));
    munmap(const_cast<std::byte*>(data), block.size);
    if (!block.shm_name.empty()) shm_unlink(block.shm_name.c_str());
  }
}

std::string FakeDevice::name() const { return absl::StrCat("fake:", options_.device); }

absl::StatusOr<DeviceMemory> FakeDevice::Allocate(size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("fake device: allocating 0 bytes");
  std::string name;
  {
    absl::MutexLock lock(&mu_);
    if (bytes > options_.capacity_bytes - allocated_bytes_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "fake device: allocating ", bytes, " bytes: ", allocated_bytes_, " of ",
          options_.capacity_bytes, " are in use"));
    }
    allocated_bytes_ += bytes;
    // Unique on the host: the process, a random salt (PIDs are reused),
    // and a counter shared by every fake device of the process (a process
    // may hold several, e.g. one per in-process rank).
    static const uint32_t salt = std::random_device()();
    static std::atomic<uint64_t> next_name{0};
    name = absl::StrCat(kNamePrefix, getpid(), "-", salt, "-", next_name++);
  }
  auto undo = [&] {
    absl::MutexLock lock(&mu_);
    allocated_bytes_ -= bytes;
  };
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    undo();
    return absl::ErrnoToStatus(errno, absl::StrCat("fake device: shm_open(", name,
                                                   ") (is /dev/shm mounted and writable?)"));
  }
  absl::StatusOr<void*> data =
      ftruncate(fd, static_cast<off_t>(bytes)) == 0
          ? Map(fd, bytes, name)
          : absl::ErrnoToStatus(errno, absl::StrCat("fake device: sizing ", name, " to ",
                                                    bytes, " bytes"));
  close(fd);
  if (!data.ok()) {
    shm_unlink(name.c_str());
    undo();
    return data.status();
  }
  // Garbage, as cudaMalloc's memory may be: code that takes fresh device
  // memory for zeros fails here rather than only on a GPU.
  std::memset(*data, kFreshByte, bytes);
  absl::MutexLock lock(&mu_);
  blocks_[static_cast<const std::byte*>(*data)] = Block{bytes, name, /*mapped=*/false};
  return DeviceMemory(this, *data, bytes);
}

void FakeDevice::Pause() {
  absl::MutexLock lock(&pause_mu_);
  running_ = false;
}

void FakeDevice::Resume() {
  absl::MutexLock lock(&pause_mu_);
  running_ = true;
}

void FakeDevice::AwaitResumed() {
  absl::MutexLock lock(&pause_mu_);
  pause_mu_.Await(absl::Condition(&running_));
}

void FakeDevice::AddStream(FakeStream* stream) {
  absl::MutexLock lock(&mu_);
  streams_.insert(stream);
}

void FakeDevice::RemoveStream(FakeStream* stream) {
  absl::MutexLock lock(&mu_);
  streams_.erase(stream);
}

void FakeDevice::Release(void* data, size_t size) {
  Block block;
  {
    absl::MutexLock lock(&mu_);
    for (FakeStream* stream : streams_) stream->Drain();
    auto it = blocks_.find(static_cast<const std::byte*>(data));
    if (it == blocks_.end()) {
      std::fprintf(stderr, "fake device: releasing %p, which it does not hold\n", data);
      return;
    }
    block = std::move(it->second);
    blocks_.erase(it);
    if (!block.mapped) allocated_bytes_ -= block.size;
  }
  if (munmap(data, size) != 0) {
    std::fprintf(stderr, "fake device: munmap(%p, %zu): %s\n", data, size, std::strerror(errno));
  }
  if (!block.shm_name.empty()) {
    CheckNoImporter(block.shm_name, block.size);
    shm_unlink(block.shm_name.c_str());
  }
}

std::map<const std::byte*, FakeDevice::Block>::const_iterator FakeDevice::Find(
    const void* ptr) const {
  const auto* at = static_cast<const std::byte*>(ptr);
  auto it = blocks_.upper_bound(at);
  if (it == blocks_.begin()) return blocks_.end();
  --it;
  if (static_cast<size_t>(at - it->first) >= it->second.size) return blocks_.end();
  return it;
}

absl::StatusOr<PointerInfo> FakeDevice::Query(const void* ptr) {
  if (ptr == nullptr) return absl::InvalidArgumentError("fake device: querying a null pointer");
  absl::MutexLock lock(&mu_);
  PointerInfo info;
  auto it = Find(ptr);
  if (it == blocks_.end()) return info;  // host memory
  info.kind = MemoryKind::kDevice;
  info.device = options_.device;
  info.base = it->first;
  info.size = it->second.size;
  if (const size_t piece = options_.query_piece_bytes; piece > 0) {
    const size_t offset = static_cast<size_t>(static_cast<const std::byte*>(ptr) - it->first);
    const size_t start = offset - offset % piece;
    info.base = it->first + start;
    info.size = std::min(piece, it->second.size - start);
  }
  return info;
}

absl::Status FakeDevice::CheckRange(const void* ptr, size_t bytes, const char* what) {
  absl::MutexLock lock(&mu_);
  auto it = Find(ptr);
  if (it == blocks_.end()) return absl::OkStatus();
  const size_t offset = static_cast<const std::byte*>(ptr) - it->first;
  if (bytes > it->second.size - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fake device: the ", what, " (", bytes, " bytes at offset ", offset,
        ") runs past the end of its ", it->second.size, "-byte allocation"));
  }
  return absl::OkStatus();
}

absl::Status FakeDevice::CountOperation(absl::Status* when_run) {
  const int n = ++operations_;
  if (options_.refuse_operation != 0 && n == options_.refuse_operation) return options_.fault;
  *when_run = options_.fail_operation != 0 && n == options_.fail_operation ? options_.fault
                                                                           : absl::OkStatus();
  return absl::OkStatus();
}

absl::Status FakeDevice::NextRecordFault() {
  for (int left = records_to_fail_.load(); left > 0;) {
    if (records_to_fail_.compare_exchange_weak(left, left - 1)) return options_.fault;
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> FakeDevice::Idle() {
  absl::MutexLock lock(&mu_);
  for (FakeStream* stream : streams_) {
    absl::StatusOr<bool> idle = stream->Idle();
    if (!idle.ok() || !*idle) return idle;
  }
  return true;
}

absl::Status FakeDevice::PinHost(void* ptr, size_t bytes) {
  if (ptr == nullptr || bytes == 0) {
    return absl::InvalidArgumentError("fake device: pinning a null or empty range");
  }
  absl::MutexLock lock(&mu_);
  if (Find(ptr) != blocks_.end()) {
    return absl::InvalidArgumentError("fake device: pinning device memory");
  }
  const auto* at = static_cast<const std::byte*>(ptr);
  auto next = pinned_.lower_bound(at);
  const bool overlaps_next = next != pinned_.end() && next->first < at + bytes;
  const bool overlaps_previous = next != pinned_.begin() &&
                                 std::prev(next)->first + std::prev(next)->second > at;
  if (overlaps_next || overlaps_previous) {
    return absl::InvalidArgumentError(
        absl::StrFormat("fake device: host range %p + %zu is already pinned", ptr, bytes));
  }
  pinned_[at] = bytes;
  return absl::OkStatus();
}

absl::Status FakeDevice::UnpinHost(void* ptr) {
  absl::MutexLock lock(&mu_);
  if (pinned_.erase(static_cast<const std::byte*>(ptr)) == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("fake device: host memory at %p was not pinned", ptr));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Stream>> FakeDevice::CreateStream() {
  return std::unique_ptr<Stream>(new FakeStream(this));
}

absl::StatusOr<std::unique_ptr<Stream>> FakeDevice::WrapStream(void* native) {
  auto* stream = static_cast<FakeStream*>(native);
  absl::MutexLock lock(&mu_);
  if (streams_.count(stream) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        name(), ": ", absl::Hex(reinterpret_cast<uintptr_t>(native)), " is not a live stream of this device (wrap the "
        "native_handle() of one of its streams)"));
  }
  return std::unique_ptr<Stream>(new FakeStreamView(stream));
}

absl::StatusOr<std::unique_ptr<Event>> FakeDevice::CreateEvent() {
  return std::unique_ptr<Event>(new FakeEvent(this));
}

absl::StatusOr<IpcHandle> FakeDevice::ExportIpc(const void* base) {
  absl::MutexLock lock(&mu_);
  auto it = blocks_.find(static_cast<const std::byte*>(base));
  if (it == blocks_.end() || it->second.mapped) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fake device: exporting ", absl::StrFormat("%p", base),
        ", which is not the base of an allocation of this process (Query gives the base)"));
  }
  if (options_.ipc_export_limit_bytes > 0 && it->second.size > options_.ipc_export_limit_bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "fake device: the allocation at ", absl::StrFormat("%p", base), " (", it->second.size,
        " bytes) refuses IPC export (FakeDeviceOptions::ipc_export_limit_bytes ",
        options_.ipc_export_limit_bytes, ", as expandable segments' memory does)"));
  }
  IpcHandle handle;
  HandleHeader header;
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.pid = static_cast<int32_t>(getpid());
  header.device = options_.device;
  header.size = it->second.size;
  std::memcpy(handle.bytes.data(), &header, sizeof(header));
  const std::string& name = it->second.shm_name;
  ABSL_RAW_CHECK(name.size() < kNameBytes, "fake device: shm name too long");
  std::memcpy(handle.bytes.data() + kNameOffset, name.data(), name.size());
  return handle;
}

absl::StatusOr<DeviceMemory> FakeDevice::OpenIpc(const IpcHandle& handle) {
  // The handle came from a peer: copied once, checked, then used.
  const IpcHandle copy = handle;
  HandleHeader header;
  std::memcpy(&header, copy.bytes.data(), sizeof(header));
  if (std::memcmp(header.magic, kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError(
        "fake device: the IPC handle is not one of the fake device's (wrong magic)");
  }
  const char* name_bytes = reinterpret_cast<const char*>(copy.bytes.data() + kNameOffset);
  const size_t name_length = strnlen(name_bytes, kNameBytes);
  const std::string name(name_bytes, name_length);
  if (name_length == kNameBytes || !absl::StartsWith(name, kNamePrefix) ||
      name.find('/', 1) != std::string::npos) {
    return absl::InvalidArgumentError("fake device: the IPC handle's name is malformed");
  }
  if (header.pid == static_cast<int32_t>(getpid())) {
    return absl::InvalidArgumentError(
        "fake device: an IPC handle does not open in the process that exported it (as with "
        "CUDA); use the allocation itself");
  }
  if (header.size == 0) return absl::InvalidArgumentError("fake device: an IPC handle of 0 bytes");
  UniqueFd fd(shm_open(name.c_str(), O_RDWR, 0));
  if (fd.get() < 0) {
    const int error = errno;
    if (error == ENOENT) {
      return absl::UnavailableError(absl::StrCat(
          "fake device: the allocation behind IPC handle ", name,
          " is gone (freed by process ", header.pid, ", or that process ended)"));
    }
    return absl::ErrnoToStatus(error, absl::StrCat("fake device: opening IPC handle ", name));
  }
  // Held while mapped: the exporter sees the allocation is open here.
  RETURN_IF_ERROR(LockShared(fd.get(), name));
  struct stat st;
  const bool sized =
      fstat(fd.get(), &st) == 0 && static_cast<uint64_t>(st.st_size) == header.size;
  absl::StatusOr<void*> data =
      sized ? Map(fd.get(), header.size, name)
            : absl::InvalidArgumentError(absl::StrCat(
                  "fake device: IPC handle ", name, " says ", header.size,
                  " bytes, which is not the size of the allocation it names"));
  RETURN_IF_ERROR(data.status());
  absl::MutexLock lock(&mu_);
  blocks_[static_cast<const std::byte*>(*data)] =
      Block{header.size, "", /*mapped=*/true, std::move(fd)};
  return DeviceMemory(this, *data, header.size);
}

absl::StatusOr<DmaBuf> FakeDevice::ExportDmaBuf(const void* ptr, size_t bytes) {
  if (ptr == nullptr || bytes == 0) {
    return absl::InvalidArgumentError("fake device: exporting a null or empty range as a dma-buf");
  }
  std::string name;
  size_t offset = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = Find(ptr);
    if (it == blocks_.end() || it->second.mapped) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fake device: exporting ", absl::StrFormat("%p", ptr),
          " as a dma-buf: it is not in an allocation of this process"));
    }
    offset = static_cast<const std::byte*>(ptr) - it->first;
    if (bytes > it->second.size - offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fake device: exporting ", bytes, " bytes at offset ", offset,
          " as a dma-buf: that runs past the end of the ", it->second.size,
          "-byte allocation"));
    }
    name = it->second.shm_name;
  }
  // The fake's "dma-buf" is its shared-memory object: mapping the
  // descriptor shows the allocation from its first byte, as a real
  // dma-buf's would. No NIC registers it (it is no dma-buf to the kernel).
  UniqueFd fd(shm_open(name.c_str(), O_RDWR, 0));
  if (fd.get() < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("fake device: opening ", name,
                                                   " to export it as a dma-buf"));
  }
  return DmaBuf{std::move(fd), offset, bytes};
}

}  // namespace rdmaflow::device
