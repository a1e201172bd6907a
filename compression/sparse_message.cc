// File: sparse_message.cc
#include "compression/sparse_message.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace rdmaflow::compression {
namespace {

constexpr uint32_t kMagic = 0x50534652;  // "RFSP" little-endian

absl::Status Refuse(int member, const std::string& what) {
  return absl::DataLossError(absl::StrCat(
      "sparse gradient message from member ", member, ": ", what,
      " (a peer on another codec or version, or memory corrupted in flight)"));
}

}  // namespace

size_t SparseMessageBytes(size_t pairs) {
  return kSparseHeaderBytes + pairs * (sizeof(uint32_t) + sizeof(float));
}

size_t WriteSparseMessage(uint64_t step, absl::Span<const uint32_t> indices,
                          absl::Span<const float> source, absl::Span<std::byte> out) {
  const uint32_t pairs = static_cast<uint32_t>(indices.size());
  std::byte* at = out.data();
  std::memcpy(at, &kMagic, 4);
  std::memcpy(at + 4, &pairs, 4);
  std::memcpy(at + 8, &step, 8);
  std::byte* index_at = at + kSparseHeaderBytes;
  std::byte* value_at = index_at + indices.size() * sizeof(uint32_t);
  if (!indices.empty()) {  // an empty span's data() may be null: no memcpy from it
    std::memcpy(index_at, indices.data(), indices.size() * sizeof(uint32_t));
  }
  for (size_t j = 0; j < indices.size(); ++j) {
    std::memcpy(value_at + j * sizeof(float), &source[indices[j]], sizeof(float));
  }
  return SparseMessageBytes(indices.size());
}

absl::Status AddSparseMessage(absl::Span<const std::byte> message, uint64_t step,
                              size_t max_pairs, int member, absl::Span<float> out,
                              float scale, SparseFit fit) {
  // The message may be peer-writable memory that changes under us: every
  // field is read once into private memory, checked there, and only the
  // copy is used (docs/security.md, "read once").
  if (message.size() < kSparseHeaderBytes) {
    return Refuse(member, absl::StrCat(message.size(), " bytes, shorter than its header"));
  }
  uint32_t magic = 0;
  uint32_t pairs = 0;
  uint64_t stamped = 0;
  std::memcpy(&magic, message.data(), 4);
  std::memcpy(&pairs, message.data() + 4, 4);
  std::memcpy(&stamped, message.data() + 8, 8);
  if (magic != kMagic) return Refuse(member, absl::StrCat("bad magic 0x", absl::Hex(magic)));
  if (stamped != step) {
    return Refuse(member, absl::StrCat("stamped step ", stamped, ", expected ", step));
  }
  if (pairs > max_pairs) {
    return Refuse(member, absl::StrCat(pairs, " pairs, more than the ", max_pairs,
                                       " the codec allows"));
  }
  // pairs <= max_pairs, which the codec sized to fit memory: no overflow.
  const size_t bytes = SparseMessageBytes(pairs);
  if (fit == SparseFit::kExact ? message.size() != bytes : message.size() < bytes) {
    return Refuse(member, absl::StrCat(message.size(), " bytes for ", pairs, " pairs (",
                                       bytes, fit == SparseFit::kExact ? "" : " at least",
                                       " expected)"));
  }
  // The indices, copied once: the checks and the additions both use the copy.
  std::vector<uint32_t> indices(pairs);
  const std::byte* index_at = message.data() + kSparseHeaderBytes;
  if (pairs > 0) std::memcpy(indices.data(), index_at, size_t{pairs} * sizeof(uint32_t));
  int64_t previous = -1;
  for (uint32_t j = 0; j < pairs; ++j) {
    const uint32_t i = indices[j];
    if (i >= out.size() || static_cast<int64_t>(i) <= previous) {
      return Refuse(member, absl::StrCat("pair ", j, " has index ", i,
                                         i >= out.size()
                                             ? absl::StrCat(", beyond the tensor's ", out.size())
                                             : std::string(", not above the one before it")));
    }
    previous = i;
  }
  // Each value is read once (any bit pattern is a float; a value the peer
  // changes meanwhile is its own gradient's business).
  const std::byte* value_at = index_at + size_t{pairs} * sizeof(uint32_t);
  for (uint32_t j = 0; j < pairs; ++j) {
    float v = 0;
    std::memcpy(&v, value_at + size_t{j} * sizeof(float), sizeof(v));
    out[indices[j]] += scale * v;
  }
  return absl::OkStatus();
}

}  // namespace rdmaflow::compression
