// File: call_word.cc
#include "collectives/call_word.h"

#include "absl/strings/str_cat.h"

namespace rdmaflow::collectives::call_word {

uint64_t Pack(uint64_t kind, int root, DataType type, ReduceOp op, uint8_t variant) {
  return (static_cast<uint64_t>(root < 0 ? 0 : root) << 32) | (kind << 24) |
         (static_cast<uint64_t>(variant) << 16) | (static_cast<uint64_t>(type) << 8) |
         static_cast<uint64_t>(op);
}

std::string Describe(uint64_t offset, uint64_t count, uint64_t word) {
  if (word == kPoisoned) {
    return absl::StrCat("something with a bad range or root (offset ", offset, ", count ",
                        count, "; its own error says which)");
  }
  const uint64_t root = word >> 32, kind = (word >> 24) & 0xff;
  const uint64_t variant = (word >> 16) & 0xff, type = (word >> 8) & 0xff, op = word & 0xff;
  if (kind == kBroadcast && (word & 0xffff) == 0) {
    return absl::StrCat("Broadcast(offset ", offset, ", ", count, " bytes, root position ",
                        root, variant != 0 ? absl::StrCat(", variant ", variant) : "", ")");
  }
  const bool known = (kind == kAllReduce ? root == 0 : kind == kReduce) &&
                     type <= static_cast<uint64_t>(DataType::kInt64) &&
                     op <= static_cast<uint64_t>(ReduceOp::kMax);
  if (!known) {
    return absl::StrCat("an unknown call (offset ", offset, ", count ", count,
                        ", type/op word ", word, ")");
  }
  return absl::StrCat(kind == kReduce ? "Reduce" : "AllReduce", "(offset ", offset,
                      ", count ", count, ", ", DataTypeName(static_cast<DataType>(type)), " ",
                      ReduceOpName(static_cast<ReduceOp>(op)),
                      variant != 0 ? absl::StrCat(", variant ", variant) : "",
                      kind == kReduce ? absl::StrCat(", root position ", root) : "", ")");
}

}  // namespace rdmaflow::collectives::call_word
