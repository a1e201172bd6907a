// File: versioned_buffer.cc
#include "runtime/versioned_buffer.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "rdma/blocking.h"
#include "rdma/rendezvous.h"

namespace rdmaflow::runtime {
namespace {

constexpr size_t kAlign = 64;
constexpr int kMaxAttempts = 1000;
// Stamps hold 2v + 1 while version v is written: no version from here on
// fits.
constexpr uint64_t kVersionLimit = uint64_t{1} << 63;

// Only for sizes CheckLayout() has accepted (or the header of at most
// kMaxCopies copies): none of these wraps then.
size_t RoundUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
size_t HeaderBytes(int copies) {
  return RoundUp(sizeof(uint64_t) * (1 + static_cast<size_t>(copies)));
}
size_t Stride(size_t bytes) { return RoundUp(bytes); }

// Header words: [0] latest version, [1 + i] stamp of copy i.
constexpr uint64_t kNeverWritten = ~uint64_t{0};
size_t StampWord(uint64_t version, int copies) { return 1 + version % copies; }

std::string RegionKey(const std::string& name) {
  return absl::StrCat("versioned/", name);
}
std::string LayoutKey(const std::string& ns, const std::string& name) {
  return absl::StrCat(ns, "/versioned/", name, "/layout");
}

void StoreWord(std::byte* base, size_t word, uint64_t value) {
  __atomic_store_n(reinterpret_cast<uint64_t*>(base) + word, value,
                   __ATOMIC_RELEASE);
}
uint64_t LoadWord(const std::byte* base, size_t word) {
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(base) + word,
                         __ATOMIC_ACQUIRE);
}

// Checks `bytes` and `copies` (the caller's, or a layout from the store) and
// returns the bytes of the header and the copies, computed without
// wrapping. kInvalidArgument naming the field otherwise.
absl::StatusOr<size_t> CheckLayout(size_t bytes, int copies) {
  if (bytes == 0) return absl::InvalidArgumentError("bytes is 0");
  if (copies < 2 || copies > VersionedBuffer::kMaxCopies) {
    return absl::InvalidArgumentError(absl::StrCat(
        "copies is ", copies, ", it must be in 2..", VersionedBuffer::kMaxCopies));
  }
  size_t stride = 0, all_copies = 0, total = 0;
  if (__builtin_add_overflow(bytes, kAlign - 1, &stride) ||
      __builtin_mul_overflow(stride / kAlign * kAlign, static_cast<size_t>(copies),
                             &all_copies) ||
      __builtin_add_overflow(HeaderBytes(copies), all_copies, &total)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bytes is ", bytes, ": ", copies, " copies of it overflow size_t"));
  }
  return total;
}

}  // namespace

// --- VersionedBuffer ---------------------------------------------------------

absl::StatusOr<std::unique_ptr<VersionedBuffer>> VersionedBuffer::Create(
    rdma::Transport& transport, rdma::Store& store, const std::string& ns,
    const std::string& name, size_t bytes, int copies) {
  if (bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("versioned buffer '", name, "' of 0 bytes"));
  }
  if (copies < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "versioned buffer '", name, "' needs at least 2 copies, got ", copies));
  }
  absl::StatusOr<size_t> region_bytes = CheckLayout(bytes, copies);
  if (!region_bytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "versioned buffer '", name, "': ", region_bytes.status().message()));
  }
  ASSIGN_OR_RETURN(rdma::MemoryRegion region, transport.Allocate(*region_bytes));
  auto owned = std::make_unique<rdma::MemoryRegion>(std::move(region));
  for (int i = 1; i < copies; ++i) StoreWord(owned->data(), 1 + i, kNeverWritten);
  StoreWord(owned->data(), 1, 0);  // copy 0 holds version 0 (zeros)
  StoreWord(owned->data(), 0, 0);
  RETURN_IF_ERROR(rdma::PublishAddress(store, ns, transport));
  RETURN_IF_ERROR(store.Set(LayoutKey(ns, name), absl::StrCat(bytes, " ", copies)));
  RETURN_IF_ERROR(rdma::PublishRegion(store, ns, RegionKey(name), owned->descriptor()));
  return std::unique_ptr<VersionedBuffer>(
      new VersionedBuffer(std::move(owned), bytes, copies));
}

VersionedBuffer::VersionedBuffer(std::unique_ptr<rdma::MemoryRegion> region,
                                 size_t bytes, int copies)
    : region_(std::move(region)), bytes_(bytes), copies_(copies) {}

std::byte* VersionedBuffer::CopyData(uint64_t version) const {
  return region_->data() + HeaderBytes(copies_) +
         (version % copies_) * Stride(bytes_);
}

void VersionedBuffer::Update(
    absl::FunctionRef<void(std::byte* next, const std::byte* latest)> fill) {
  const uint64_t next = version_ + 1;
  std::byte* header = region_->data();
  const size_t stamp = StampWord(next, copies_);
  StoreWord(header, stamp, 2 * next + 1);  // being written
  std::atomic_thread_fence(std::memory_order_seq_cst);
  fill(CopyData(next), CopyData(version_));
  std::atomic_thread_fence(std::memory_order_release);
  StoreWord(header, stamp, 2 * next);  // complete
  StoreWord(header, 0, next);          // and the latest
  version_ = next;
}

// --- VersionedReader ---------------------------------------------------------

absl::StatusOr<std::unique_ptr<VersionedReader>> VersionedReader::Create(
    rdma::Transport& transport, rdma::Store& store, const std::string& ns,
    const std::string& name, int owner_rank, absl::Duration timeout) {
  std::unique_ptr<VersionedReader> reader(
      new VersionedReader(transport, name, owner_rank, timeout));
  absl::StatusOr<std::string> layout =
      store.Get(LayoutKey(ns, name), timeout);
  if (!layout.ok()) {
    return absl::Status(
        layout.status().code(),
        absl::StrCat("versioned buffer '", name, "' of rank ", owner_rank,
                     " was not published: ", layout.status().message()));
  }
  // The layout comes from the store: untrusted until checked against the
  // descriptor, without wrapping, before it sizes anything.
  std::vector<std::string> fields = absl::StrSplit(*layout, ' ');
  if (fields.size() != 2 || !absl::SimpleAtoi(fields[0], &reader->bytes_) ||
      !absl::SimpleAtoi(fields[1], &reader->copies_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "versioned buffer '", name, "' of rank ", owner_rank,
        ": malformed layout '", *layout, "' in the store (expected '<bytes> <copies>')"));
  }
  absl::StatusOr<size_t> needed = CheckLayout(reader->bytes_, reader->copies_);
  if (!needed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "versioned buffer '", name, "' of rank ", owner_rank, ": the layout '",
        *layout, "' in the store is invalid: ", needed.status().message()));
  }
  ASSIGN_OR_RETURN(rdma::RemoteRegion remote,
                   rdma::FetchRegion(store, ns, RegionKey(name), timeout));
  if (remote.owner_rank != owner_rank || remote.length < *needed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "versioned buffer '", name, "': the descriptor (",
        remote.DebugString(), ") does not hold ", *needed,
        " bytes of rank ", owner_rank, " (layout '", *layout, "')"));
  }
  reader->remote_ = std::make_unique<rdma::RemoteRegion>(std::move(remote));
  ASSIGN_OR_RETURN(reader->endpoint_,
                   rdma::ConnectToPeer(transport, store, ns, owner_rank, timeout));
  ASSIGN_OR_RETURN(rdma::MemoryRegion scratch,
                   transport.Allocate(HeaderBytes(reader->copies_)));
  reader->scratch_ = std::make_unique<rdma::MemoryRegion>(std::move(scratch));
  return reader;
}

VersionedReader::VersionedReader(rdma::Transport& transport, std::string name,
                                 int owner, absl::Duration timeout)
    : transport_(transport),
      name_(std::move(name)),
      owner_(owner),
      timeout_(timeout) {}

absl::Status VersionedReader::ReadWords(size_t offset, size_t count) {
  const size_t length = count * sizeof(uint64_t);
  absl::Status status = rdma::Read(
      transport_, *endpoint_, {scratch_.get(), offset, length},
      {remote_.get(), offset, length}, absl::Now() + timeout_);
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat("reading versioned buffer '", name_,
                                   "' of rank ", owner_, ": ", status.message()));
}

absl::Status VersionedReader::CheckVersion(uint64_t version) {
  if (version >= kVersionLimit) {
    failed_ = absl::DataLossError(absl::StrCat(
        "versioned buffer '", name_, "' of rank ", owner_,
        " broke the protocol: its header says version ", version,
        ", beyond the largest a stamp can hold (2^63 - 1); is anything else "
        "writing into its memory?"));
  } else if (version < last_version_) {
    failed_ = absl::DataLossError(absl::StrCat(
        "versioned buffer '", name_, "' of rank ", owner_,
        " broke the protocol: its header went back from version ", last_version_,
        " to ", version, " (versions only go up; a restarted owner needs a new "
        "name); is anything else writing into its memory?"));
  } else {
    last_version_ = version;
    return absl::OkStatus();
  }
  std::fprintf(stderr, "%s\n", std::string(failed_.message()).c_str());
  return failed_;
}

absl::StatusOr<uint64_t> VersionedReader::LatestVersion() {
  RETURN_IF_ERROR(failed_);
  RETURN_IF_ERROR(ReadWords(0, 1));
  const uint64_t version = LoadWord(scratch_->data(), 0);
  RETURN_IF_ERROR(CheckVersion(version));
  return version;
}

absl::StatusOr<uint64_t> VersionedReader::Read(const rdma::LocalSlice& dst) {
  if (dst.region == nullptr || dst.length != bytes_ ||
      dst.offset > dst.region->size() ||
      dst.length > dst.region->size() - dst.offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reading versioned buffer '", name_, "' of rank ", owner_,
        ": the destination must be ", bytes_,
        " bytes inside a registered region"));
  }
  RETURN_IF_ERROR(failed_);
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    if (attempt > 0) ++retries_;
    // 1. The header: which version is the latest, and its copy's stamp.
    RETURN_IF_ERROR(ReadWords(0, 1 + copies_));
    const uint64_t version = LoadWord(scratch_->data(), 0);
    RETURN_IF_ERROR(CheckVersion(version));  // 2 * version does not wrap
    const size_t stamp = StampWord(version, copies_);
    if (LoadWord(scratch_->data(), stamp) != 2 * version) continue;
    // 2. The copy.
    const size_t offset =
        HeaderBytes(copies_) + (version % copies_) * Stride(bytes_);
    absl::Status status =
        rdma::Read(transport_, *endpoint_, dst, {remote_.get(), offset, bytes_},
                   absl::Now() + timeout_);
    if (!status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat("reading versioned buffer '", name_,
                                       "' of rank ", owner_, ": ",
                                       status.message()));
    }
    // 3. The stamp again: unchanged means no write touched the copy.
    RETURN_IF_ERROR(ReadWords(stamp * sizeof(uint64_t), 1));
    if (LoadWord(scratch_->data(), stamp) == 2 * version) return version;
  }
  return absl::AbortedError(absl::StrCat(
      "versioned buffer '", name_, "' of rank ", owner_, ": ", kMaxAttempts,
      " reads in a row lost the race against the owner's updates; give it "
      "more copies"));
}

}  // namespace rdmaflow::runtime
