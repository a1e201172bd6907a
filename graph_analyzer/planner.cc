// File: planner.cc
#include "graph_analyzer/planner.h"

#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph_analyzer/shape_util.h"
#include "graph_analyzer/slot_allocator.h"

namespace rdmaflow::graph {
namespace {

// No single slot may exceed this (16 TiB): far above any real tensor, and
// low enough that sums over a plan cannot overflow 64 bits unnoticed.
constexpr uint64_t kMaxSlotBytes = uint64_t{1} << 44;

// `overflowed` is the result of a __builtin_*_overflow computing `what`.
absl::Status CheckOverflow(bool overflowed, absl::string_view what) {
  if (!overflowed) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " overflows 64 bits"));
}

absl::StatusOr<plan::TensorSlot> MakeSlot(const AnalyzedGraph& graph,
                                          const Transfer& t, int id,
                                          const PlannerOptions& options) {
  plan::TensorSlot slot;
  slot.set_id(id);
  slot.set_tensor(
      absl::StrCat(graph.def(t.tensor.node).name(), ":", t.tensor.output));
  *slot.mutable_spec() = graph.spec(t.tensor);
  slot.set_live_begin(t.live_begin);
  slot.set_live_end(t.live_end);
  bool on_device = !t.consumers.empty();
  for (int consumer : t.consumers) {
    slot.add_consumers(graph.def(consumer).name());
    on_device &= graph.def(consumer).memory() == MEMORY_DEVICE;
  }
  slot.set_source_memory(graph.def(t.tensor.node).memory());
  if (std::optional<int64_t> bytes = NumBytes(slot.spec())) {
    // A dynamic tensor goes through host memory, also once tracing
    // promotes it: only a static one gets a device slot.
    slot.set_memory(on_device ? MEMORY_DEVICE : MEMORY_HOST);
    slot.set_kind(plan::STATIC);
    slot.set_bytes(*bytes);
    return slot;
  }
  uint64_t needed = 8 * (4 + slot.spec().shape_size());
  if (needed > options.metadata_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dynamic tensor ", slot.tensor(), " ", SpecString(slot.spec()),
        " needs ", needed, " bytes of metadata, more than metadata_bytes = ",
        options.metadata_bytes, "; raise it"));
  }
  slot.set_kind(plan::DYNAMIC);
  slot.set_bytes(options.metadata_bytes);
  return slot;
}

// Where a slot lives: the device region for a static device slot, the
// host region otherwise.
bool InDeviceRegion(const plan::TensorSlot& slot) {
  return slot.kind() == plan::STATIC && slot.memory() == MEMORY_DEVICE;
}

// Lays out `requests` in one stage: offsets (in order) and the stage's
// bytes. Slots that may share memory come first; the rest follow, each in
// memory of its own.
absl::StatusOr<SlotLayout> LayoutStage(const plan::PlannerConfig& config,
                                       const std::vector<SlotRequest>& requests,
                                       const std::string& where) {
  std::vector<SlotRequest> shared, own;
  std::vector<int> shared_index, own_index;
  for (int i = 0; i < static_cast<int>(requests.size()); ++i) {
    const bool shares =
        config.share_slots() && requests[i].bytes >= config.min_shared_bytes();
    (shares ? shared : own).push_back(requests[i]);
    (shares ? shared_index : own_index).push_back(i);
  }
  const SlotLayout shared_layout = LayoutSlots(shared, config.alignment(), true);
  const SlotLayout own_layout = LayoutSlots(own, config.alignment(), false);
  SlotLayout layout;
  layout.offsets.resize(requests.size());
  for (size_t k = 0; k < shared_index.size(); ++k) {
    layout.offsets[shared_index[k]] = shared_layout.offsets[k];
  }
  RETURN_IF_ERROR(CheckOverflow(
      __builtin_add_overflow(shared_layout.peak, own_layout.peak, &layout.peak), where));
  // Every own offset is below own_layout.peak: no wrap past the sum.
  for (size_t k = 0; k < own_index.size(); ++k) {
    layout.offsets[own_index[k]] = shared_layout.peak + own_layout.offsets[k];
  }
  return layout;
}

absl::Status LayoutRegion(const plan::PlannerConfig& config,
                          plan::LinkRegion& link) {
  // Host and device slots are laid out apart, each in a region of its own.
  std::vector<SlotRequest> requests[2];
  std::vector<int> index[2];
  for (int i = 0; i < link.slot_size(); ++i) {
    const plan::TensorSlot& slot = link.slot(i);
    if (slot.bytes() == 0 || slot.bytes() > kMaxSlotBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", slot.tensor(), " on link ", link.src_rank(), "->",
          link.dst_rank(), ": slot of ", slot.bytes(),
          " bytes is not in 1 .. 2^44"));
    }
    const int where = InDeviceRegion(slot) ? 1 : 0;
    requests[where].push_back({slot.bytes(), slot.live_begin(), slot.live_end()});
    index[where].push_back(i);
  }
  uint64_t stage[2] = {0, 0};
  uint64_t region[2] = {0, 0};
  for (int where = 0; where < 2; ++where) {
    const std::string name = absl::StrCat(where == 1 ? "device " : "", "region of link ",
                                          link.src_rank(), "->", link.dst_rank());
    ASSIGN_OR_RETURN(SlotLayout layout, LayoutStage(config, requests[where], name));
    for (size_t k = 0; k < index[where].size(); ++k) {
      link.mutable_slot(index[where][k])->set_offset(layout.offsets[k]);
    }
    stage[where] = layout.peak;
    RETURN_IF_ERROR(CheckOverflow(
        __builtin_mul_overflow(layout.peak, config.pipeline_depth(), &region[where]), name));
  }
  link.set_alignment(config.alignment());
  link.set_depth(config.pipeline_depth());
  link.set_stage_bytes(stage[0]);
  link.set_region_bytes(region[0]);
  link.set_device_stage_bytes(stage[1]);
  link.set_device_region_bytes(region[1]);
  return absl::OkStatus();
}

absl::Status Summarize(plan::TransferPlan& plan) {
  plan.clear_rank();
  for (int r = 0; r < plan.world_size(); ++r) plan.add_rank()->set_rank(r);
  const plan::PlannerConfig& config = plan.config();
  // A tensor sent to several ranks is written from one send buffer.
  std::set<std::pair<int, std::string>> sent;
  for (const plan::LinkRegion& link : plan.link()) {
    plan::RankSummary& dst = *plan.mutable_rank(link.dst_rank());
    uint64_t receive = 0;
    uint64_t device = 0;
    const std::string receiving = absl::StrCat("receive bytes of rank ", dst.rank());
    RETURN_IF_ERROR(CheckOverflow(
        __builtin_add_overflow(dst.receive_bytes(), link.region_bytes(),
                               &receive) ||
            __builtin_add_overflow(receive, link.device_region_bytes(), &receive) ||
            __builtin_add_overflow(dst.device_bytes(), link.device_region_bytes(), &device),
        receiving));
    dst.set_receive_bytes(receive);
    dst.set_device_bytes(device);
    dst.set_num_regions(dst.num_regions() + 1);
    plan::RankSummary& src = *plan.mutable_rank(link.src_rank());
    for (const plan::TensorSlot& slot : link.slot()) {
      if (slot.kind() != plan::STATIC ||
          !sent.emplace(link.src_rank(), slot.tensor()).second) {
        continue;
      }
      uint64_t buffer = 0;
      uint64_t send = 0;
      std::string what = absl::StrCat("send bytes of rank ", src.rank());
      RETURN_IF_ERROR(CheckOverflow(
          __builtin_mul_overflow(AlignUp(slot.bytes(), config.alignment()),
                                 config.pipeline_depth(), &buffer),
          what));
      RETURN_IF_ERROR(CheckOverflow(
          __builtin_add_overflow(src.send_bytes(), buffer, &send), what));
      src.set_send_bytes(send);
      if (slot.source_memory() == MEMORY_DEVICE) {
        uint64_t device = 0;
        RETURN_IF_ERROR(CheckOverflow(
            __builtin_add_overflow(src.device_bytes(), buffer, &device), what));
        src.set_device_bytes(device);
      }
    }
  }
  for (plan::RankSummary& rank : *plan.mutable_rank()) {
    uint64_t total = 0;
    RETURN_IF_ERROR(CheckOverflow(
        __builtin_add_overflow(rank.receive_bytes(), rank.send_bytes(),
                               &total),
        absl::StrCat("registered bytes of rank ", rank.rank())));
    rank.set_registered_bytes(total);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckPlannerOptions(const PlannerOptions& options) {
  uint64_t a = options.alignment;
  if (a < 64 || a > (uint64_t{1} << 30) || (a & (a - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "alignment ", a, " must be a power of two in 64 .. 1073741824"));
  }
  if (options.pipeline_depth < 1 || options.pipeline_depth > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline depth ", options.pipeline_depth,
                     " must be in 1 .. 16 (2 or more overlaps consecutive steps)"));
  }
  uint64_t m = options.metadata_bytes;
  if (m < 64 || m > 4096 || m % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metadata bytes ", m, " must be a multiple of 8 in 64 .. 4096"));
  }
  if (options.min_shared_bytes > (uint64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "min_shared_bytes ", options.min_shared_bytes, " must be at most 1 GiB"));
  }
  return absl::OkStatus();
}

PlannerOptions OptionsFromConfig(const plan::PlannerConfig& config) {
  PlannerOptions options;
  options.alignment = config.alignment();
  options.pipeline_depth = config.pipeline_depth();
  options.metadata_bytes = config.metadata_bytes();
  options.share_slots = config.share_slots();
  options.min_shared_bytes = config.min_shared_bytes();
  return options;
}

absl::Status LayoutPlan(plan::TransferPlan& plan) {
  RETURN_IF_ERROR(CheckPlannerOptions(OptionsFromConfig(plan.config())));
  if (plan.world_size() < 0 || plan.world_size() > kMaxWorldSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan's world_size ", plan.world_size(),
                     " is not in 0 .. ", kMaxWorldSize));
  }
  for (plan::LinkRegion& link : *plan.mutable_link()) {
    if (link.src_rank() < 0 || link.src_rank() >= plan.world_size() ||
        link.dst_rank() < 0 || link.dst_rank() >= plan.world_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "link ", link.src_rank(), "->", link.dst_rank(),
          " is outside the world of ", plan.world_size(), " ranks"));
    }
    RETURN_IF_ERROR(LayoutRegion(plan.config(), link));
  }
  return Summarize(plan);
}

absl::StatusOr<plan::TransferPlan> BuildPlan(const AnalyzedGraph& graph,
                                             const Partition& partition,
                                             const PlannerOptions& options) {
  RETURN_IF_ERROR(CheckPlannerOptions(options));
  plan::TransferPlan plan;
  plan.set_graph_name(graph.graph().name());
  plan.set_world_size(graph.world_size());
  plan::PlannerConfig& config = *plan.mutable_config();
  config.set_alignment(options.alignment);
  config.set_pipeline_depth(options.pipeline_depth);
  config.set_metadata_bytes(options.metadata_bytes);
  config.set_share_slots(options.share_slots);
  config.set_min_shared_bytes(options.min_shared_bytes);
  plan::LinkRegion* link = nullptr;
  for (int id = 0; id < static_cast<int>(partition.transfers.size()); ++id) {
    const Transfer& t = partition.transfers[id];
    if (link == nullptr || link->src_rank() != t.src_rank ||
        link->dst_rank() != t.dst_rank) {
      link = plan.add_link();
      link->set_src_rank(t.src_rank);
      link->set_dst_rank(t.dst_rank);
    }
    ASSIGN_OR_RETURN(*link->add_slot(), MakeSlot(graph, t, id, options));
  }
  RETURN_IF_ERROR(LayoutPlan(plan));
  return plan;
}

absl::StatusOr<plan::TransferPlan> PlanGraph(GraphDef graph,
                                             const PlannerOptions& options) {
  RETURN_IF_ERROR(CheckPlannerOptions(options));
  ASSIGN_OR_RETURN(AnalyzedGraph analyzed, AnalyzeGraph(std::move(graph)));
  return BuildPlan(analyzed, PartitionGraph(analyzed), options);
}

}  // namespace rdmaflow::graph
