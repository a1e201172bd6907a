// File: plan_printer.cc
#include "graph_analyzer/plan_printer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/text_table.h"
#include "graph_analyzer/display_text.h"
#include "graph_analyzer/shape_util.h"

namespace rdmaflow::graph {
namespace {

std::string KindName(const plan::TensorSlot& slot) {
  if (slot.kind() == plan::STATIC) {
    return absl::StrCat(slot.promoted() ? "promoted" : "static",
                        slot.memory() == MEMORY_DEVICE ? " (device)" : "");
  }
  return slot.kind() == plan::DYNAMIC ? "dynamic" : "unspecified";
}

std::string FormatLink(const plan::LinkRegion& link) {
  int num_static = 0;
  int num_dynamic = 0;
  uint64_t static_bytes = 0;
  TextTable table({"id", "tensor", "dtype", "shape", "kind", "bytes", "offset",
                   "live", "consumers"});
  for (const plan::TensorSlot& slot : link.slot()) {
    bool is_static = slot.kind() == plan::STATIC;
    (is_static ? num_static : num_dynamic)++;
    if (is_static) static_bytes += slot.bytes();
    std::string consumers =
        slot.consumers_size() > 0 ? DisplayText(slot.consumers(0)) : "";
    if (slot.consumers_size() > 1) {
      absl::StrAppend(&consumers, " +", slot.consumers_size() - 1);
    }
    table.AddRow({absl::StrCat(slot.id()), DisplayText(slot.tensor()),
                  DataTypeName(slot.spec().dtype()),
                  ShapeString(slot.spec().shape()), KindName(slot),
                  is_static ? absl::StrCat(slot.bytes())
                            : absl::StrCat(slot.bytes(), " (meta)"),
                  absl::StrCat(slot.offset()),
                  absl::StrCat(slot.live_begin(), "..", slot.live_end()),
                  consumers});
  }
  return absl::StrCat(
      "link ", link.src_rank(), " -> ", link.dst_rank(), ": ",
      link.slot_size(), " tensors (", num_static, " static, ", num_dynamic,
      " dynamic), ", FormatBytes(static_bytes), " static per step; region ",
      FormatBytes(link.region_bytes()), " = ", link.depth(), " x ",
      FormatBytes(link.stage_bytes()),
      link.device_region_bytes() > 0
          ? absl::StrCat("; device region ", FormatBytes(link.device_region_bytes()), " = ",
                         link.depth(), " x ", FormatBytes(link.device_stage_bytes()))
          : std::string(),
      "\n", table.Render("  "), "\n");
}

}  // namespace

std::string PlanSummaryLine(const plan::TransferPlan& plan) {
  int tensors = 0;
  uint64_t registered = 0;
  for (const plan::LinkRegion& link : plan.link()) tensors += link.slot_size();
  for (const plan::RankSummary& rank : plan.rank()) {
    registered += rank.registered_bytes();
  }
  const plan::PlannerConfig& c = plan.config();
  return absl::StrCat("plan '", DisplayText(plan.graph_name()),
                      "': ", plan.world_size(), " ranks, ", plan.link_size(),
                      " links, ", tensors, " transfers, ",
                      FormatBytes(registered), " registered (alignment ",
                      c.alignment(), " B, pipeline depth ", c.pipeline_depth(),
                      ", slot sharing ",
                      c.share_slots() ? absl::StrCat("on from ", FormatBytes(c.min_shared_bytes()))
                                      : std::string("off"),
                      ")");
}

std::string FormatPlan(const plan::TransferPlan& plan) {
  std::string out = absl::StrCat(PlanSummaryLine(plan), "\n\n");
  for (const plan::LinkRegion& link : plan.link()) {
    absl::StrAppend(&out, FormatLink(link));
  }
  TextTable ranks({"rank", "receive", "send", "registered", "regions"});
  uint64_t receive = 0;
  uint64_t send = 0;
  int regions = 0;
  for (const plan::RankSummary& r : plan.rank()) {
    ranks.AddRow({absl::StrCat(r.rank()), FormatBytes(r.receive_bytes()),
                  FormatBytes(r.send_bytes()),
                  FormatBytes(r.registered_bytes()),
                  absl::StrCat(r.num_regions())});
    receive += r.receive_bytes();
    send += r.send_bytes();
    regions += r.num_regions();
  }
  ranks.AddSeparator();
  ranks.AddRow({"all", FormatBytes(receive), FormatBytes(send),
                FormatBytes(receive + send), absl::StrCat(regions)});
  absl::StrAppend(&out, "registered memory per rank\n", ranks.Render("  "));
  uint64_t device = 0;
  for (const plan::RankSummary& r : plan.rank()) device += r.device_bytes();
  if (device > 0) {
    absl::StrAppend(&out, "of which in device memory: ", FormatBytes(device), " (");
    const char* separator = "";
    for (const plan::RankSummary& r : plan.rank()) {
      if (r.device_bytes() == 0) continue;
      absl::StrAppend(&out, separator, "rank ", r.rank(), " ", FormatBytes(r.device_bytes()));
      separator = ", ";
    }
    absl::StrAppend(&out, ")\n");
  }
  if (plan.promoted_tensor_size() > 0) {
    absl::StrAppend(&out, "\npromoted by tracing: ",
                    plan.promoted_tensor_size(), " tensor(s)\n");
  }
  return out;
}

std::vector<std::string> RegisteredMemoryWarnings(
    const plan::TransferPlan& plan, uint64_t physical_bytes) {
  std::vector<std::string> warnings;
  for (const plan::RankSummary& r : plan.rank()) {
    // Device memory is not the host's to pin.
    const uint64_t host = r.registered_bytes() - std::min(r.device_bytes(), r.registered_bytes());
    if (host <= physical_bytes) continue;
    warnings.push_back(absl::StrCat(
        "rank ", r.rank(), " registers ", FormatBytes(host),
        r.device_bytes() > 0 ? " of host memory" : "",
        " (receive ", FormatBytes(r.receive_bytes()), ", send ",
        FormatBytes(r.send_bytes()), "), more than the ",
        FormatBytes(physical_bytes),
        " of physical memory here: registration pins every page, so it "
        "fails on a machine like this one; shrink the tensors, lower "
        "--pipeline_depth or spread the work over more ranks"));
  }
  return warnings;
}

}  // namespace rdmaflow::graph
