// File: link_records.cc
#include "runtime/link_records.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace rdmaflow::runtime {
namespace {

// FNV-1a, 64 bits: the same on every rank and build for the same input
// (absl::Hash is seeded per process).
class Fingerprint {
 public:
  void Add(uint64_t value) {
    for (int i = 0; i < 8; ++i) Byte((value >> (8 * i)) & 0xff);
  }
  void Add(absl::string_view text) {
    Add(text.size());
    for (char c : text) Byte(static_cast<unsigned char>(c));
  }
  uint64_t value() const { return hash_; }

 private:
  void Byte(uint64_t byte) { hash_ = (hash_ ^ byte) * 0x100000001b3ULL; }
  uint64_t hash_ = 0xcbf29ce484222325ULL;
};

}  // namespace

std::string ExecutorLinkScope(int generation, const plan::LinkRegion& link) {
  return absl::StrCat("executor/g", generation, "/", link.src_rank(), "-", link.dst_rank());
}

std::string ExecutorLinkLayout(const plan::LinkRegion& link) {
  // Where each tensor lies, not only the totals: two plans whose slots have
  // the same sizes in another order fill the same bytes with other tensors.
  Fingerprint slots;
  slots.Add(link.alignment());
  slots.Add(link.device_stage_bytes());
  for (const plan::TensorSlot& slot : link.slot()) {
    slots.Add(static_cast<uint64_t>(slot.id()));
    slots.Add(slot.tensor());
    slots.Add(static_cast<uint64_t>(slot.kind()));
    slots.Add(slot.offset());
    slots.Add(slot.bytes());
    slots.Add(static_cast<uint64_t>(slot.memory()));
  }
  return absl::StrCat("executor link v1: ", link.src_rank(), "->", link.dst_rank(),
                      " slots=", link.slot_size(), " depth=", link.depth(),
                      " stage=", link.stage_bytes(), " host=", link.region_bytes(),
                      " device=", link.device_region_bytes(),
                      absl::StrFormat(" slot map %016x", slots.value()));
}

std::string RdmaCopyLayout(size_t ring_slots, size_t slot_bytes) {
  return absl::StrCat("rdma_copy v2: ring_slots=", ring_slots, " slot_bytes=", slot_bytes);
}

}  // namespace rdmaflow::runtime
