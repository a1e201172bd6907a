// File: rank_plan.cc
#include "runtime/rank_plan.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph_analyzer/shape_util.h"

namespace rdmaflow::runtime {
namespace {

constexpr int kMaxDepth = 16;
// Notifications carry (slot index << 4 | stage) in 32 bits.
constexpr int kMaxSlotsPerLink = 1 << 28;

absl::Status Malformed(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed plan: ", what));
}

}  // namespace

std::string TransferInfo::Describe() const {
  return absl::StrCat("tensor '", tensor, "' (id ", id, ", rank ", src_rank,
                      " -> ", dst_rank, ")");
}

absl::StatusOr<RankPlan> RankPlan::Create(const plan::TransferPlan& plan,
                                          int rank) {
  if (plan.world_size() <= 0) return Malformed("world_size is not positive");
  if (rank < 0 || rank >= plan.world_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, " is outside the plan's world of ", plan.world_size(),
        " ranks (graph '", plan.graph_name(),
        "'): was the plan made for this job's WORLD_SIZE?"));
  }
  RankPlan out;
  out.rank_ = rank;
  out.world_size_ = plan.world_size();
  out.plan_ = plan;
  std::set<int> peers;
  for (int l = 0; l < plan.link_size(); ++l) {
    const plan::LinkRegion& link = plan.link(l);
    const std::string where =
        absl::StrCat("link ", link.src_rank(), " -> ", link.dst_rank());
    if (link.src_rank() < 0 || link.src_rank() >= plan.world_size() ||
        link.dst_rank() < 0 || link.dst_rank() >= plan.world_size() ||
        link.src_rank() == link.dst_rank()) {
      return Malformed(absl::StrCat(where, " has a bad rank"));
    }
    if (link.depth() < 1 || link.depth() > kMaxDepth) {
      return Malformed(absl::StrCat(where, " has depth ", link.depth(),
                                    " (1..", kMaxDepth, ")"));
    }
    // Stages are below 2^44 * slots (the planner's bound): compared by
    // division, so a forged size cannot wrap the product.
    for (const auto& [what, region, stage] :
         {std::tuple<const char*, uint64_t, uint64_t>{"region", link.region_bytes(),
                                                     link.stage_bytes()},
          {"device region", link.device_region_bytes(), link.device_stage_bytes()}}) {
      if (region / link.depth() != stage || region % link.depth() != 0) {
        return Malformed(absl::StrCat(where, " ", what, " of ", region, " bytes is not ",
                                      link.depth(), " stages of ", stage));
      }
    }
    if (link.region_bytes() == 0 && link.device_region_bytes() == 0) {
      return Malformed(absl::StrCat(where, " has no region"));
    }
    if (link.slot_size() >= kMaxSlotsPerLink) {
      return Malformed(absl::StrCat(where, " has too many slots"));
    }
    const bool mine = link.src_rank() == rank || link.dst_rank() == rank;
    if (link.src_rank() == rank) {
      out.send_links_.push_back(l);
      peers.insert(link.dst_rank());
    }
    if (link.dst_rank() == rank) {
      out.recv_links_.push_back(l);
      peers.insert(link.src_rank());
    }
    for (int s = 0; s < link.slot_size(); ++s) {
      const plan::TensorSlot& slot = link.slot(s);
      TransferInfo info;
      info.id = slot.id();
      info.tensor = slot.tensor();
      info.spec = slot.spec();
      info.dynamic = slot.kind() == plan::DYNAMIC;
      info.src_rank = link.src_rank();
      info.dst_rank = link.dst_rank();
      info.link = l;
      info.slot_index = s;
      info.device = slot.kind() == plan::STATIC && slot.memory() == graph::MEMORY_DEVICE;
      info.device_source = slot.source_memory() == graph::MEMORY_DEVICE;
      info.offset = slot.offset();
      info.slot_bytes = slot.bytes();
      info.stage_bytes = info.device ? link.device_stage_bytes() : link.stage_bytes();
      info.depth = link.depth();
      info.live_begin = slot.live_begin();
      info.live_end = slot.live_end();
      info.element_bytes = graph::DataTypeSize(slot.spec().dtype());
      if (info.id < 0 || info.id > 16 * 1024 * 1024) {
        return Malformed(absl::StrCat(info.Describe(), " has a bad id"));
      }
      if (info.element_bytes == 0) {
        return Malformed(absl::StrCat(info.Describe(), " has no dtype"));
      }
      if (slot.kind() != plan::STATIC && slot.kind() != plan::DYNAMIC) {
        return Malformed(absl::StrCat(info.Describe(), " has no slot kind"));
      }
      if (!graph::Memory_IsValid(slot.memory()) ||
          !graph::Memory_IsValid(slot.source_memory())) {
        return Malformed(absl::StrCat(info.Describe(), " names an unknown memory"));
      }
      if (slot.bytes() == 0 || slot.offset() > info.stage_bytes ||
          slot.bytes() > info.stage_bytes - slot.offset()) {
        return Malformed(absl::StrCat(info.Describe(), " slot [", slot.offset(),
                                      ", +", slot.bytes(),
                                      ") is outside its stage of ",
                                      info.stage_bytes, " bytes",
                                      info.device ? " (device region)" : ""));
      }
      if (info.dynamic) {
        const uint64_t need =
            8 * (kMetadataHeaderWords + slot.spec().shape_size());
        if (slot.bytes() < need) {
          return Malformed(absl::StrCat(info.Describe(), " metadata slot of ",
                                        slot.bytes(), " bytes is below the ",
                                        need, " its rank needs"));
        }
      } else {
        std::optional<int64_t> bytes = graph::NumBytes(slot.spec());
        if (!bytes.has_value() || static_cast<uint64_t>(*bytes) > slot.bytes()) {
          return Malformed(absl::StrCat(info.Describe(), " static slot of ",
                                        slot.bytes(), " bytes cannot hold ",
                                        graph::SpecString(slot.spec())));
        }
        info.data_bytes = static_cast<uint64_t>(*bytes);
      }
      if (info.id >= static_cast<int>(out.all_.size())) {
        out.all_.resize(info.id + 1);
      }
      if (out.all_[info.id].id != -1) {
        return Malformed(absl::StrCat("id ", info.id, " is used by both ",
                                      out.all_[info.id].Describe(), " and ",
                                      info.Describe()));
      }
      out.all_[info.id] = info;
      if (!mine) continue;
      if (link.src_rank() == rank) out.sends_.push_back(info);
      if (link.dst_rank() == rank) out.recvs_.push_back(info);
    }
  }
  out.send_index_.assign(out.all_.size(), -1);
  out.recv_index_.assign(out.all_.size(), -1);
  for (size_t i = 0; i < out.sends_.size(); ++i) {
    out.send_index_[out.sends_[i].id] = static_cast<int>(i);
  }
  for (size_t i = 0; i < out.recvs_.size(); ++i) {
    out.recv_index_[out.recvs_[i].id] = static_cast<int>(i);
  }
  out.peers_.assign(peers.begin(), peers.end());
  return out;
}

absl::StatusOr<const TransferInfo*> RankPlan::Find(
    int id, const std::vector<int>& index, const std::vector<TransferInfo>& list,
    bool send) const {
  if (id >= 0 && id < static_cast<int>(index.size()) && index[id] >= 0) {
    return &list[index[id]];
  }
  if (id < 0 || id >= static_cast<int>(all_.size()) || all_[id].id == -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank_, ": the plan of graph '", plan_.graph_name(),
        "' has no transfer with id ", id));
  }
  const TransferInfo& info = all_[id];
  return absl::InvalidArgumentError(
      absl::StrCat("rank ", rank_, send ? " cannot send " : " cannot receive ",
                   info.Describe(), ": rank ",
                   send ? info.src_rank : info.dst_rank,
                   send ? " sends it" : " receives it"));
}

absl::StatusOr<const TransferInfo*> RankPlan::FindSend(int id) const {
  return Find(id, send_index_, sends_, /*send=*/true);
}

absl::StatusOr<const TransferInfo*> RankPlan::FindRecv(int id) const {
  return Find(id, recv_index_, recvs_, /*send=*/false);
}

absl::StatusOr<uint64_t> CheckShape(const TransferInfo& info,
                                    absl::Span<const int64_t> shape) {
  const auto& spec = info.spec.shape();
  if (static_cast<int>(shape.size()) != spec.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        info.Describe(), ": got shape ", graph::ShapeString(shape),
        ", the plan expects ", graph::SpecString(info.spec)));
  }
  constexpr uint64_t kMaxElements = uint64_t{1} << 50;
  bool empty = false;
  for (int d = 0; d < spec.size(); ++d) {
    if (shape[d] < 0 || (spec[d] != graph::kUnknownDim && spec[d] != shape[d])) {
      return absl::InvalidArgumentError(absl::StrCat(
          info.Describe(), ": got shape ", graph::ShapeString(shape),
          ", the plan expects ", graph::SpecString(info.spec)));
    }
    if (shape[d] > graph::kMaxDim) {
      return absl::InvalidArgumentError(absl::StrCat(
          info.Describe(), ": dimension ", d, " of ", shape[d], " is too large"));
    }
    empty |= shape[d] == 0;
  }
  if (empty) return 0;
  // Shapes may come from a peer: bounded before each product, so it never
  // wraps (a product past 2^64 could otherwise look small).
  uint64_t elements = 1;
  for (int d = 0; d < spec.size(); ++d) {
    const uint64_t dim = static_cast<uint64_t>(shape[d]);
    if (dim > kMaxElements / elements) {
      return absl::InvalidArgumentError(
          absl::StrCat(info.Describe(), ": shape ", graph::ShapeString(shape),
                       " has more than 2^50 elements"));
    }
    elements *= dim;
  }
  return elements * static_cast<uint64_t>(info.element_bytes);
}

absl::Status CheckDeviceSources(const RankPlan& plan) {
  for (const auto* transfers : {&plan.sends(), &plan.recvs()}) {
    for (const TransferInfo& info : *transfers) {
      if (!info.device_source || info.device) continue;
      return absl::FailedPreconditionError(absl::StrCat(
          info.Describe(), " is held in device memory on rank ", info.src_rank,
          " but read from host memory on rank ", info.dst_rank,
          " (or its size is dynamic): the executor writes device memory into device slots "
          "only; place its consumers on the device, or copy it to host memory before the "
          "send"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckHostMemoryOnly(const RankPlan& plan, absl::string_view who) {
  for (const auto* transfers : {&plan.sends(), &plan.recvs()}) {
    for (const TransferInfo& info : *transfers) {
      if (!info.device && !info.device_source) continue;
      return absl::FailedPreconditionError(absl::StrCat(
          info.Describe(), " lives in device memory in the plan, and ", who,
          " moves host memory only (device slots: the zero-copy executor over a device "
          "transport, docs/device.md)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int> RankPlan::IdOf(bool send, const std::string& tensor,
                                   int peer) const {
  for (const TransferInfo& info : send ? sends_ : recvs_) {
    if (info.tensor == tensor && (send ? info.dst_rank : info.src_rank) == peer) {
      return info.id;
    }
  }
  return absl::NotFoundError(absl::StrCat(
      "rank ", rank_, "'s plan has no transfer of ", tensor,
      send ? " to rank " : " from rank ", peer));
}

}  // namespace rdmaflow::runtime
