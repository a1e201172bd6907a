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

DeviceP2p::DeviceP2p(TensorDevice& device, size_t mappings_per_peer)
    : device_(device), mappings_per_peer_(mappings_per_peer == 0 ? 1 : mappings_per_peer) {}

DeviceP2p::~DeviceP2p() = default;

absl::StatusOr<DeviceP2p::Outgoing> DeviceP2p::Describe(int peer, const void* data, size_t bytes,
                                                        absl::Time deadline) {
  DeviceMessageHeader header;
  header.bytes = bytes;
  absl::StatusOr<device::IpcHandle> handle =
      absl::FailedPreconditionError("an empty tensor travels inline");
  if (bytes > 0) {
    absl::StatusOr<device::PointerInfo> info = device_.runtime().Query(data);
    if (!info.ok()) return info.status();
    if (info->kind != device::MemoryKind::kDevice) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a device tensor's send: its memory is not memory of ", device_.runtime().name()));
    }
    const auto* at = static_cast<const std::byte*>(data);
    const auto* base = static_cast<const std::byte*>(info->base);
    if (at >= base && static_cast<size_t>(at - base) <= info->size &&
        bytes <= info->size - static_cast<size_t>(at - base)) {
      header.offset = static_cast<uint64_t>(at - base);
      handle = device_.runtime().ExportIpc(info->base);
    } else {
      // Beyond the piece CUDA reports: memory mapped a piece at a time
      // (torch's expandable segments), which does not export either.
      handle = absl::FailedPreconditionError("a tensor across pieces of mapped memory");
    }
  }
  Outgoing out;
  header.sequence = next_sequence_[peer]++;
  out.sequence = header.sequence;
  if (handle.ok()) {
    header.kind = DeviceMessageHeader::kIpc;
    header.handle = *handle;
    out.handle = *handle;
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
                                size_t bytes, absl::Time deadline, DeviceAck& answer,
                                bool* inline_bytes) {
  ASSIGN_OR_RETURN(const DeviceMessageHeader header,
                   ParseDeviceMessage(buffer.data.get(), got, bytes, peer));
  answer.sequence = header.sequence;
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
  absl::StatusOr<std::list<Mapping>::iterator> mapped = Map(peer, header.handle, answer);
  if (!mapped.ok()) {
    return absl::Status(mapped.status().code(),
                        absl::StrCat("mapping rank ", peer, "'s CUDA tensor (CUDA IPC): ",
                                     mapped.status().message()));
  }
  const size_t size = (*mapped)->memory.size();
  if (header.offset > size || bytes > size - header.offset) {
    // Nothing read it: closed at once (the sender pins nothing for it).
    mappings_.erase(*mapped);
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", peer, "'s CUDA tensor of ", bytes, " bytes at offset ", header.offset,
        " does not lie within its allocation of ", size, " bytes"));
  }
  absl::Status copied = device_.Copy(
      dst, static_cast<const std::byte*>((*mapped)->memory.data()) + header.offset, bytes,
      deadline,
      absl::StrCat("copying rank ", peer, "'s CUDA tensor into the receiving tensor (CUDA IPC)"));
  if (absl::IsDeadlineExceeded(copied)) {
    answer.flags |= DeviceAck::kCopyMayRun;
    Abandon(*mapped);
  } else if (!copied.ok()) {
    // The sender pins nothing for a failed receive: the mapping goes.
    mappings_.erase(*mapped);
  }
  return copied;
}

absl::Status DeviceP2p::Answered(int peer, const Outgoing& sent, const DeviceAck& answer,
                                 const at::Tensor& tensor) {
  // The answer is the peer's: copied by the caller, its handle only looked
  // up among our own pins.
  if (answer.sequence != sent.sequence) {
    return absl::DataLossError(absl::StrCat(
        "rank ", peer, " answered message ", answer.sequence, " where this rank waited for ",
        sent.sequence, "'s answer (a receive of a CUDA tensor given up on there?)"));
  }
  if ((answer.flags & DeviceAck::kEvicted) != 0) pins_.erase({peer, answer.evicted.bytes});
  if (!sent.inline_bytes) pins_[{peer, sent.handle.bytes}] = tensor;
  return absl::OkStatus();
}

absl::StatusOr<std::list<DeviceP2p::Mapping>::iterator> DeviceP2p::Map(
    int peer, const device::IpcHandle& handle, DeviceAck& answer) {
  size_t of_peer = 0;
  auto oldest = mappings_.end();
  for (auto it = mappings_.begin(); it != mappings_.end(); ++it) {
    if (it->peer != peer) continue;
    if (it->handle.bytes == handle.bytes) {
      mappings_.splice(mappings_.begin(), mappings_, it);
      return mappings_.begin();
    }
    ++of_peer;
    oldest = it;
  }
  ASSIGN_OR_RETURN(device::DeviceMemory memory, device_.runtime().OpenIpc(handle));
  ++mappings_opened_;
  // The peer's least recently used goes (none is in use: copies are waited
  // for before Deliver returns), and the answer says so.
  if (of_peer >= mappings_per_peer_ && oldest != mappings_.end()) {
    answer.flags |= DeviceAck::kEvicted;
    answer.evicted = oldest->handle;
    mappings_.erase(oldest);
  }
  mappings_.push_front(Mapping{peer, handle, std::move(memory)});
  return mappings_.begin();
}

void DeviceP2p::Abandon(std::list<Mapping>::iterator mapping) {
  new device::DeviceMemory(std::move(mapping->memory));
  mappings_.erase(mapping);
}

}  // namespace rdmaflow::torch_backend
