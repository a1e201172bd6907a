// File: envelope.cc
#include "rdma/ucx/envelope.h"

#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace rdmaflow::rdma::ucx {
namespace {

constexpr char kRkeyMagic[8] = {'R', 'F', 'U', 'C', 'X', 'K', '0', '1'};
// 02: the process identity names its PID namespace. 03: the flag inbox.
constexpr char kAddressMagic[8] = {'R', 'F', 'U', 'C', 'X', 'A', '0', '3'};
// An inbox section: its length (0: none), then address, bytes, lanes,
// slots and the packed rkey.
constexpr size_t kInboxFixedBytes = 8 + 8 + 4 + 4;
constexpr size_t kHeaderBytes = 16;  // magic, checksum

// FNV-1a: a stable checksum (the same in every process).
uint64_t Fnv1a(const void* data, size_t size) {
  uint64_t hash = 1469598103934665603ull;
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    hash ^= bytes[i];
    hash *= 1099511628211ull;
  }
  return hash;
}

std::string Wrap(const char (&magic)[8], const void* payload, size_t size) {
  std::string out(magic, 8);
  const uint64_t sum = Fnv1a(payload, size);
  out.append(reinterpret_cast<const char*>(&sum), 8);
  out.append(static_cast<const char*>(payload), size);
  return out;
}

absl::StatusOr<std::string> Unwrap(const char (&magic)[8], absl::string_view wrapped,
                                   const char* what) {
  if (wrapped.size() <= kHeaderBytes || std::memcmp(wrapped.data(), magic, 8) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed UCX ", what, " (bad header)"));
  }
  uint64_t sum = 0;
  std::memcpy(&sum, wrapped.data() + 8, 8);
  const absl::string_view payload = wrapped.substr(kHeaderBytes);
  if (Fnv1a(payload.data(), payload.size()) != sum) {
    return absl::InvalidArgumentError(
        absl::StrCat("corrupted UCX ", what, " (checksum mismatch)"));
  }
  return std::string(payload);
}

}  // namespace

std::string WrapRkey(const void* rkey_buffer, size_t size) {
  return Wrap(kRkeyMagic, rkey_buffer, size);
}

absl::StatusOr<std::string> UnwrapRkey(absl::string_view packed) {
  return Unwrap(kRkeyMagic, packed, "remote key");
}

std::string WrapWorkerAddress(const ProcessIdentity& identity, const void* address,
                              size_t size,
                              const std::optional<FlagInboxAddress>& inbox) {
  std::string payload = identity.Encode();
  std::string section;
  if (inbox.has_value()) {
    section.append(reinterpret_cast<const char*>(&inbox->address), 8);
    section.append(reinterpret_cast<const char*>(&inbox->bytes), 8);
    section.append(reinterpret_cast<const char*>(&inbox->lanes), 4);
    section.append(reinterpret_cast<const char*>(&inbox->slots), 4);
    section.append(inbox->rkey);
  }
  const auto section_length = static_cast<uint32_t>(section.size());
  payload.append(reinterpret_cast<const char*>(&section_length), 4);
  payload.append(section);
  payload.append(static_cast<const char*>(address), size);
  return Wrap(kAddressMagic, payload.data(), payload.size());
}

absl::StatusOr<WorkerAddress> UnwrapWorkerAddress(absl::string_view packed) {
  ASSIGN_OR_RETURN(const std::string payload,
                   Unwrap(kAddressMagic, packed, "worker address"));
  absl::string_view rest(payload);
  if (rest.size() < ProcessIdentity::kEncodedSize + 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "truncated UCX worker address (", payload.size(), " bytes, more than ",
        ProcessIdentity::kEncodedSize + 4, " expected)"));
  }
  WorkerAddress address;
  ASSIGN_OR_RETURN(address.identity,
                   ProcessIdentity::Decode(rest.substr(0, ProcessIdentity::kEncodedSize)));
  rest.remove_prefix(ProcessIdentity::kEncodedSize);
  uint32_t section_length = 0;
  std::memcpy(&section_length, rest.data(), 4);
  rest.remove_prefix(4);
  if (section_length != 0) {
    if (section_length <= kInboxFixedBytes || section_length > rest.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "malformed UCX worker address: an inbox section of ", section_length,
          " bytes (more than ", kInboxFixedBytes, " expected) in ", rest.size(),
          " bytes"));
    }
    FlagInboxAddress inbox;
    std::memcpy(&inbox.address, rest.data(), 8);
    std::memcpy(&inbox.bytes, rest.data() + 8, 8);
    std::memcpy(&inbox.lanes, rest.data() + 16, 4);
    std::memcpy(&inbox.slots, rest.data() + 20, 4);
    inbox.rkey = std::string(rest.substr(kInboxFixedBytes, section_length - kInboxFixedBytes));
    address.inbox = std::move(inbox);
    rest.remove_prefix(section_length);
  }
  if (rest.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "truncated UCX worker address (", payload.size(), " bytes and no UCX address)"));
  }
  address.ucx = std::string(rest);
  return address;
}

}  // namespace rdmaflow::rdma::ucx
