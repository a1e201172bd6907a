#include "torch_backend/device_p2p.h"

#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace rdmaflow::torch_backend {

absl::StatusOr<DeviceMessageHeader> ParseDeviceMessage(const std::byte* message, size_t got,
                                                       size_t expected_bytes, int peer) {
  const std::string from = absl::StrCat("the device message from rank ", peer);
  if (message == nullptr || got < sizeof(DeviceMessageHeader)) {
    return absl::InvalidArgumentError(absl::StrCat(
        from, " has ", got, " bytes, less than its header's ", sizeof(DeviceMessageHeader),
        " (does that rank run the same rdmaflow?)"));
  }
  DeviceMessageHeader header;
  std::memcpy(&header, message, sizeof(header));
  if (header.magic != DeviceMessageHeader::kMagic ||
      header.version != DeviceMessageHeader::kVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        from, " is not one (magic ", header.magic, ", version ", header.version,
        "): does that rank run the same rdmaflow?"));
  }
  if (header.bytes != expected_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", peer, " sent a CUDA tensor of ", header.bytes,
        " bytes to a receiving tensor of ", expected_bytes, " bytes"));
  }
  switch (header.kind) {
    case DeviceMessageHeader::kIpc:
      if (got != sizeof(header)) {
        return absl::InvalidArgumentError(
            absl::StrCat(from, " names device memory but carries ", got - sizeof(header),
                         " bytes more"));
      }
      return header;
    case DeviceMessageHeader::kInline:
      // got >= sizeof(header): no wrap.
      if (got - sizeof(header) != header.bytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            from, " says ", header.bytes, " bytes inline and carries ", got - sizeof(header)));
      }
      return header;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(from, " is of unknown kind ", header.kind));
  }
}

DeviceP2p::DeviceP2p(TensorDevice& device, size_t max_mappings)
    : device_(device), max_mappings_(max_mappings == 0 ? 1 : max_mappings) {}

DeviceP2p::~DeviceP2p() = default;

absl::StatusOr<DeviceP2p::Outgoing> DeviceP2p::Describe(const void* data, size_t bytes,
                                                        absl::Time deadline) {
  DeviceMessageHeader header;
  header.bytes = bytes;
  absl::StatusOr<device::IpcHandle> handle =
      absl::FailedPreconditionError("an empty tensor travels inline");
  if (bytes > 0) {
    absl::StatusOr<device::PointerInfo> info = device_.runtime().Query(data);
    if (!info.ok()) return info.status();
    const auto* at = static_cast<const std::byte*>(data);
    const auto* base = static_cast<const std::byte*>(info->base);
    if (info->kind != device::MemoryKind::kDevice || at < base ||
        bytes > info->size - static_cast<size_t>(at - base)) {
      return absl::InvalidArgumentError(
          "a device tensor's send: its memory does not lie within one device allocation");
    }
    header.offset = static_cast<uint64_t>(at - base);
    handle = device_.runtime().ExportIpc(info->base);
  }
  Outgoing out;
  if (handle.ok()) {
    header.kind = DeviceMessageHeader::kIpc;
    header.handle = *handle;
    out.size = sizeof(header);
    out.data.reset(new std::byte[out.size]);
    std::memcpy(out.data.get(), &header, sizeof(header));
    return out;
  }
  // Memory that does not export (expandable segments): the bytes inline.
  header.kind = DeviceMessageHeader::kInline;
  header.offset = 0;
  out.size = sizeof(header) + bytes;
  out.data.reset(new std::byte[out.size]);
  out.inline_bytes = true;
  std::memcpy(out.data.get(), &header, sizeof(header));
  if (bytes > 0) {
    absl::Status copied = device_.Copy(out.data.get() + sizeof(header), data, bytes, deadline,
                                       "copying a CUDA tensor that does not export through "
                                       "CUDA IPC into its message");
    // A copy given up on may still land: its buffer is never freed.
    if (absl::IsDeadlineExceeded(copied)) out.data.release();
    RETURN_IF_ERROR(copied);
  }
  return out;
}

DeviceP2p::Outgoing DeviceP2p::ReceiveBuffer(size_t bytes) {
  Outgoing out;
  out.size = sizeof(DeviceMessageHeader) + bytes;
  out.data.reset(new std::byte[out.size]);
  return out;
}

absl::Status DeviceP2p::Deliver(int peer, Outgoing& buffer, size_t got, void* dst,
                                size_t bytes, absl::Time deadline, bool* inline_bytes) {
  ASSIGN_OR_RETURN(const DeviceMessageHeader header,
                   ParseDeviceMessage(buffer.data.get(), got, bytes, peer));
  *inline_bytes = header.kind == DeviceMessageHeader::kInline;
  if (bytes == 0) return absl::OkStatus();
  if (*inline_bytes) {
    absl::Status copied = device_.Copy(dst, buffer.data.get() + sizeof(header), bytes, deadline,
                                       absl::StrCat("copying the CUDA tensor rank ", peer,
                                                    " sent inline into the receiving tensor"));
    // A copy given up on may still read the buffer: it is never freed.
    if (absl::IsDeadlineExceeded(copied)) buffer.data.release();
    return copied;
  }
  absl::StatusOr<const device::DeviceMemory*> mapped = Map(peer, header.handle);
  if (!mapped.ok()) {
    return absl::Status(mapped.status().code(),
                        absl::StrCat("mapping rank ", peer, "'s CUDA tensor (CUDA IPC): ",
                                     mapped.status().message()));
  }
  const size_t size = (*mapped)->size();
  if (header.offset > size || bytes > size - header.offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", peer, "'s CUDA tensor of ", bytes, " bytes at offset ", header.offset,
        " does not lie within its allocation of ", size, " bytes"));
  }
  absl::Status copied =
      device_.Copy(dst, static_cast<const std::byte*>((*mapped)->data()) + header.offset, bytes,
                   deadline,
                   absl::StrCat("copying rank ", peer,
                                "'s CUDA tensor into the receiving tensor (CUDA IPC)"));
  if (absl::IsDeadlineExceeded(copied)) {
    // The copy may still read the mapping (Map made it the first): it is
    // never unmapped.
    new device::DeviceMemory(std::move(mappings_.front().memory));
    mappings_.pop_front();
  }
  return copied;
}

absl::StatusOr<const device::DeviceMemory*> DeviceP2p::Map(int peer,
                                                           const device::IpcHandle& handle) {
  for (auto it = mappings_.begin(); it != mappings_.end(); ++it) {
    if (it->peer == peer && it->handle.bytes == handle.bytes) {
      mappings_.splice(mappings_.begin(), mappings_, it);
      return &mappings_.front().memory;
    }
  }
  ASSIGN_OR_RETURN(device::DeviceMemory memory, device_.runtime().OpenIpc(handle));
  ++mappings_opened_;
  // The least recently used goes first; none is in use (copies are waited
  // for before Deliver returns).
  while (mappings_.size() >= max_mappings_) mappings_.pop_back();
  mappings_.push_front(Mapping{peer, handle, std::move(memory)});
  return &mappings_.front().memory;
}

}  // namespace rdmaflow::torch_backend
