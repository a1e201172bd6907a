// File: link_records.cc
#include "runtime/link_records.h"

#include "absl/strings/str_cat.h"

namespace rdmaflow::runtime {

std::string ExecutorLinkScope(int generation, const plan::LinkRegion& link) {
  return absl::StrCat("executor/g", generation, "/", link.src_rank(), "-", link.dst_rank());
}

std::string ExecutorLinkLayout(const plan::LinkRegion& link) {
  return absl::StrCat("executor link v1: ", link.src_rank(), "->", link.dst_rank(),
                      " slots=", link.slot_size(), " depth=", link.depth(),
                      " stage=", link.stage_bytes(), " host=", link.region_bytes(),
                      " device=", link.device_region_bytes());
}

std::string RdmaCopyScope(int src, int dst) { return absl::StrCat("copy/", src, "-", dst); }

std::string RdmaCopyLayout(size_t ring_slots, size_t slot_bytes) {
  return absl::StrCat("rdma_copy v1: ring_slots=", ring_slots, " slot_bytes=", slot_bytes);
}

}  // namespace rdmaflow::runtime
