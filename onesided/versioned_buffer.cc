// File: versioned_buffer.cc
#include "onesided/versioned_buffer.h"

#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "onesided/progress/waits.h"
#include "rdma/rendezvous.h"

namespace rdmaflow::onesided {
namespace {

constexpr int kMaxAttempts = 1000;

// Only for sizes CheckLayout() has accepted (or the header of at most
// kMaxCopies copies): none of these wraps then.
size_t HeaderBytes(int copies) {
  return *AlignUp(sizeof(uint64_t) * (1 + static_cast<size_t>(copies)));
}

// Header word 0 is the latest version; copy i's stamp is word 1 + i.
constexpr size_t kLatestWord = 0;

// The stamped slot holding `version`: its stamp word in the header, its
// copy at `first_copy` (after the header, or 0 in a region of the copies'
// own) plus the copies before it.
StampedSlot Slot(uint64_t version, size_t bytes, int copies, size_t first_copy) {
  const size_t copy = version % copies;
  return {sizeof(uint64_t) * (1 + copy), first_copy + copy * *AlignUp(bytes), bytes};
}

std::string RegionKey(const std::string& name) {
  return absl::StrCat("versioned/", name);
}
std::string CopiesKey(const std::string& name) {
  return absl::StrCat("versioned/", name, "/copies");
}
std::string LayoutKey(const std::string& ns, const std::string& name) {
  return absl::StrCat(ns, "/versioned/", name, "/layout");
}
// The layout's third word for copies in device memory.
constexpr char kDeviceCopies[] = "device";

// The bytes of a buffer's parts, computed without wrapping.
struct Layout {
  size_t header = 0;  // the header, padded
  size_t copies = 0;  // all the copies
  size_t total = 0;   // both, one after the other
};

// Checks `bytes` and `copies` (the caller's, or a layout from the store) and
// returns the sizes of the header and the copies. kInvalidArgument naming
// the field otherwise.
absl::StatusOr<Layout> CheckLayout(size_t bytes, int copies) {
  if (bytes == 0) return absl::InvalidArgumentError("bytes is 0");
  if (copies < 2 || copies > VersionedBuffer::kMaxCopies) {
    return absl::InvalidArgumentError(
        absl::StrCat("copies is ", copies, ", it must be in 2..",
                     VersionedBuffer::kMaxCopies));
  }
  const std::optional<size_t> stride = AlignUp(bytes);
  Layout layout;
  layout.header = HeaderBytes(copies);
  if (!stride.has_value() ||
      __builtin_mul_overflow(*stride, static_cast<size_t>(copies), &layout.copies) ||
      __builtin_add_overflow(layout.header, layout.copies, &layout.total)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bytes is ", bytes, ": ", copies, " copies of it overflow size_t"));
  }
  return layout;
}

}  // namespace

// --- VersionedBuffer ---------------------------------------------------------

absl::StatusOr<std::unique_ptr<VersionedBuffer>> VersionedBuffer::Create(
    rdma::Transport& transport, rdma::Store& store, const std::string& ns,
    const std::string& name, size_t bytes, int copies, device::MemoryKind copies_in) {
  // The address first: a reader that finds the buffer finds how to reach it.
  RETURN_IF_ERROR(rdma::PublishAddress(store, ns, transport));
  return Make(transport, store, ns, name, bytes, copies, copies_in);
}

absl::StatusOr<std::unique_ptr<VersionedBuffer>> VersionedBuffer::Create(
    PeerLinks& links, const std::string& name, size_t bytes, int copies,
    device::MemoryKind copies_in) {
  return Make(links.transport(), links.store(), links.ns(), name, bytes, copies, copies_in);
}

absl::StatusOr<std::unique_ptr<VersionedBuffer>> VersionedBuffer::Make(
    rdma::Transport& transport, rdma::Store& store, const std::string& ns,
    const std::string& name, size_t bytes, int copies, device::MemoryKind copies_in) {
  if (bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("versioned buffer '", name, "' of 0 bytes"));
  }
  if (copies < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "versioned buffer '", name, "' needs at least 2 copies, got ", copies));
  }
  absl::StatusOr<Layout> layout = CheckLayout(bytes, copies);
  if (!layout.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "versioned buffer '", name, "': ", layout.status().message()));
  }
  const bool on_device = copies_in == device::MemoryKind::kDevice;
  ASSIGN_OR_RETURN(rdma::MemoryRegion region,
                   transport.Allocate(on_device ? layout->header : layout->total));
  auto owned = std::make_unique<rdma::MemoryRegion>(std::move(region));
  // Version 0 (zeros) in copy 0, whose stamp 0 is WholeStamp(0); every other
  // stamp 0 too, which no version but 0 is read with.
  std::memset(owned->data(), 0, owned->size());
  std::unique_ptr<rdma::MemoryRegion> device_copies;
  if (on_device) {
    absl::StatusOr<rdma::MemoryRegion> allocated = transport.AllocateDevice(layout->copies);
    if (!allocated.ok()) {
      return absl::Status(allocated.status().code(),
                          absl::StrCat("versioned buffer '", name, "': its ", copies,
                                       " copies in device memory: ",
                                       allocated.status().message()));
    }
    // Zeroed (AllocateDevice), so version 0 is zeros here too.
    device_copies = std::make_unique<rdma::MemoryRegion>(*std::move(allocated));
    RETURN_IF_ERROR(
        rdma::PublishRegion(store, ns, CopiesKey(name), device_copies->descriptor()));
  }
  RETURN_IF_ERROR(store.Set(LayoutKey(ns, name),
                            on_device ? absl::StrCat(bytes, " ", copies, " ", kDeviceCopies)
                                      : absl::StrCat(bytes, " ", copies)));
  RETURN_IF_ERROR(
      rdma::PublishRegion(store, ns, RegionKey(name), owned->descriptor()));
  return std::unique_ptr<VersionedBuffer>(
      new VersionedBuffer(std::move(owned), std::move(device_copies), bytes, copies));
}

VersionedBuffer::VersionedBuffer(std::unique_ptr<rdma::MemoryRegion> region,
                                 std::unique_ptr<rdma::MemoryRegion> device_copies,
                                 size_t bytes, int copies)
    : region_(std::move(region)),
      device_copies_(std::move(device_copies)),
      copies_region_(device_copies_ != nullptr ? device_copies_.get() : region_.get()),
      bytes_(bytes),
      copies_(copies) {}

std::byte* VersionedBuffer::CopyData(uint64_t version) const {
  const size_t first = device_copies_ != nullptr ? 0 : HeaderBytes(copies_);
  return copies_region_->data() + Slot(version, bytes_, copies_, first).payload_offset;
}

void VersionedBuffer::Update(
    absl::FunctionRef<void(std::byte* next, const std::byte* latest)> fill) {
  absl::Status written = TryUpdate([&](std::byte* next, const std::byte* latest) {
    fill(next, latest);
    return absl::OkStatus();
  });
  ABSL_RAW_CHECK(written.ok(), "an infallible fill cannot fail");
}

absl::Status VersionedBuffer::TryUpdate(
    absl::FunctionRef<absl::Status(std::byte* next, const std::byte* latest)> fill) {
  const uint64_t next = version_ + 1;
  const StampedSlot slot = Slot(next, bytes_, copies_, 0);
  RETURN_IF_ERROR(WriteLocal(region_->data(), slot.stamp_offset, CopyData(next), next,
                             [&](std::byte* payload) { return fill(payload, CopyData(version_)); }));
  StoreStamp(region_->data(), sizeof(uint64_t) * kLatestWord,
             next);  // the latest
  version_ = next;
  return absl::OkStatus();
}

// --- VersionedReader ---------------------------------------------------------

absl::StatusOr<std::unique_ptr<VersionedReader>> VersionedReader::Create(
    PeerLinks& links, const std::string& name, int owner_rank, absl::Duration timeout,
    LaneKind lane) {
  rdma::Transport& transport = links.transport();
  rdma::Store& store = links.store();
  const std::string& ns = links.ns();
  std::unique_ptr<VersionedReader> reader(
      new VersionedReader(links, name, owner_rank, timeout));
  absl::StatusOr<std::string> layout = store.Get(LayoutKey(ns, name), timeout);
  if (!layout.ok()) {
    return absl::Status(
        layout.status().code(),
        absl::StrCat("versioned buffer '", name, "' of rank ", owner_rank,
                     " was not published: ", layout.status().message()));
  }
  // The layout comes from the store: untrusted until checked against the
  // descriptor, without wrapping, before it sizes anything.
  std::vector<std::string> fields = absl::StrSplit(*layout, ' ');
  if ((fields.size() != 2 && (fields.size() != 3 || fields[2] != kDeviceCopies)) ||
      !absl::SimpleAtoi(fields[0], &reader->bytes_) ||
      !absl::SimpleAtoi(fields[1], &reader->copies_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "versioned buffer '", name, "' of rank ", owner_rank, ": malformed layout '", *layout,
        "' in the store (expected '<bytes> <copies>' or '<bytes> <copies> ", kDeviceCopies,
        "')"));
  }
  const bool on_device = fields.size() == 3;
  absl::StatusOr<Layout> needed = CheckLayout(reader->bytes_, reader->copies_);
  if (!needed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "versioned buffer '", name, "' of rank ", owner_rank, ": the layout '",
        *layout, "' in the store is invalid: ", needed.status().message()));
  }
  if (on_device && !transport.capabilities().device_regions) {
    return absl::FailedPreconditionError(absl::StrCat(
        "versioned buffer '", name, "' of rank ", owner_rank,
        " keeps its copies in device memory, and this rank's transport (",
        transport.capabilities().backend,
        ") has no device regions: read it over the device transport (rdma/device)"));
  }
  // Every descriptor must be the owner's and hold what the layout says.
  auto fetch = [&](const std::string& key,
                   size_t bytes) -> absl::StatusOr<std::unique_ptr<rdma::RemoteRegion>> {
    ASSIGN_OR_RETURN(rdma::RemoteRegion remote, rdma::FetchRegion(store, ns, key, timeout));
    if (remote.owner_rank != owner_rank || remote.length < bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "versioned buffer '", name, "': the descriptor '", key, "' (", remote.DebugString(),
          ") does not hold ", bytes, " bytes of rank ", owner_rank, " (layout '", *layout,
          "')"));
    }
    return std::make_unique<rdma::RemoteRegion>(std::move(remote));
  };
  ASSIGN_OR_RETURN(reader->remote_,
                   fetch(RegionKey(name), on_device ? needed->header : needed->total));
  if (on_device) {
    ASSIGN_OR_RETURN(reader->device_copies_, fetch(CopiesKey(name), needed->copies));
    if (reader->device_copies_->memory_kind != device::MemoryKind::kDevice) {
      return absl::InvalidArgumentError(absl::StrCat(
          "versioned buffer '", name, "' of rank ", owner_rank, ": its layout says device copies, "
          "and the descriptor '", CopiesKey(name), "' (", reader->device_copies_->DebugString(),
          ") is not device memory"));
    }
  }
  reader->copies_remote_ = on_device ? reader->device_copies_.get() : reader->remote_.get();
  reader->first_copy_ = on_device ? 0 : needed->header;
  ASSIGN_OR_RETURN(reader->endpoint_, links.Lane(owner_rank, lane));
  reader->fence_ = links.FenceOn(owner_rank, absl::StrCat("the reader of versioned buffer '",
                                                         name, "' on rank ", links.rank(),
                                                         " gave up a read"));
  // Their keys now, while the owner holds the buffer (Endpoint::Prepare).
  RETURN_IF_ERROR(reader->endpoint_->Prepare(*reader->remote_));
  if (on_device) RETURN_IF_ERROR(reader->endpoint_->Prepare(*reader->device_copies_));
  ASSIGN_OR_RETURN(rdma::MemoryRegion scratch,
                   transport.Allocate(HeaderBytes(reader->copies_)));
  reader->scratch_ = std::make_unique<rdma::MemoryRegion>(std::move(scratch));
  reader->stamps_.reserve(reader->copies_);
  for (int copy = 0; copy < reader->copies_; ++copy) {
    reader->stamps_.emplace_back(
        absl::StrCat("versioned buffer '", name, "' of rank ", owner_rank),
        absl::StrCat("the stamp of copy ", copy));
  }
  return reader;
}

VersionedReader::VersionedReader(PeerLinks& links, std::string name, int owner,
                                 absl::Duration timeout)
    : links_(links),
      name_(std::move(name)),
      owner_(owner),
      timeout_(timeout),
      version_(absl::StrCat("versioned buffer '", name_, "' of rank ", owner),
               "its header", "version ", kMaxSequence) {}

absl::Status VersionedReader::Named(absl::Status status) const {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("reading versioned buffer '",
                                                  name_, "' of rank ", owner_,
                                                  ": ", status.message()));
}

absl::Status VersionedReader::ReadWords(size_t offset, size_t count) {
  // Severed by any protocol on the links: why, not a closed endpoint.
  RETURN_IF_ERROR(Named(links_.PeerStatus(owner_)));
  const size_t length = count * sizeof(uint64_t);
  return Named(
      onesided::Read(links_.loop(), *endpoint_, {scratch_.get(), offset, length},
                     {remote_.get(), offset, length}, absl::Now() + timeout_, fence_));
}

absl::Status VersionedReader::CheckVersion(uint64_t version) {
  absl::Status checked = version_.Advance(version);
  if (!checked.ok()) failed_ = checked;
  return checked;
}

absl::Status VersionedReader::Probe() {
  RETURN_IF_ERROR(Named(links_.PeerStatus(owner_)));
  return Named(Flush(links_.loop(), *endpoint_, absl::Now() + timeout_, fence_));
}

absl::Status VersionedReader::PostProbe(rdma::Completion done) {
  RETURN_IF_ERROR(Named(links_.PeerStatus(owner_)));
  return Named(endpoint_->PostFlush(std::move(done)));
}

absl::StatusOr<uint64_t> VersionedReader::LatestVersion() {
  RETURN_IF_ERROR(failed_);
  RETURN_IF_ERROR(ReadWords(0, 1));
  const uint64_t version =
      LoadStamp(scratch_->data(), sizeof(uint64_t) * kLatestWord);
  RETURN_IF_ERROR(CheckVersion(version));
  return version;
}

absl::StatusOr<uint64_t> VersionedReader::Read(const rdma::LocalSlice& dst) {
  if (dst.region == nullptr || dst.length != bytes_ ||
      dst.offset > dst.region->size() ||
      dst.length > dst.region->size() - dst.offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("reading versioned buffer '", name_, "' of rank ", owner_,
                     ": the destination must be ", bytes_,
                     " bytes inside a registered region"));
  }
  RETURN_IF_ERROR(failed_);
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    if (attempt > 0) ++retries_;
    // 1. The header: which version is the latest, and its copy's stamp.
    RETURN_IF_ERROR(ReadWords(0, 1 + copies_));
    const uint64_t version =
        LoadStamp(scratch_->data(), sizeof(uint64_t) * kLatestWord);
    RETURN_IF_ERROR(CheckVersion(version));  // its stamps fit in 64 bits
    const StampedSlot slot = Slot(version, bytes_, copies_, first_copy_);
    StampedSlotReader& stamp = stamps_[version % copies_];
    // 2. The copy, 3. its stamp again: WholeStamp(version) both times, or
    // an update overlapped and we read again.
    absl::StatusOr<SlotRead> got = stamp.TryRead(
        LoadStamp(scratch_->data(), slot.stamp_offset),
        [&] {
          RETURN_IF_ERROR(Named(links_.PeerStatus(owner_)));
          return Named(onesided::Read(links_.loop(), *endpoint_, dst,
                                      {copies_remote_, slot.payload_offset, bytes_},
                                      absl::Now() + timeout_, fence_));
        },
        [&]() -> absl::StatusOr<uint64_t> {
          RETURN_IF_ERROR(ReadWords(slot.stamp_offset, 1));
          return LoadStamp(scratch_->data(), slot.stamp_offset);
        },
        version);
    if (!stamp.status().ok()) failed_ = stamp.status();
    if (!got.ok()) return got.status();
    if (*got == SlotRead::kWhole) return version;
  }
  return absl::AbortedError(absl::StrCat(
      "versioned buffer '", name_, "' of rank ", owner_, ": ", kMaxAttempts,
      " reads in a row lost the race against the owner's updates; give it "
      "more copies"));
}

}  // namespace rdmaflow::onesided
