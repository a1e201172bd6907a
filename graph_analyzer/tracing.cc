// File: tracing.cc
#include "graph_analyzer/tracing.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "graph_analyzer/planner.h"
#include "graph_analyzer/shape_util.h"

namespace rdmaflow::graph {
namespace {

using Observation = plan::SizeTrace::Observation;

absl::Status CheckObserved(const plan::TensorSlot& slot, int step,
                           const plan::SizeTrace::ObservedShape& seen) {
  const TensorSpec& spec = slot.spec();
  bool ok = seen.dim_size() == spec.shape_size();
  for (int d = 0; ok && d < seen.dim_size(); ++d) {
    ok = seen.dim(d) > 0 && seen.dim(d) <= kMaxDim &&
         DimsCompatible(spec.shape(d), seen.dim(d));
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trace of tensor ", slot.tensor(), " at step ", step, ": shape ",
        ShapeString(seen.dim()), " contradicts its spec ", SpecString(spec)));
  }
  return absl::OkStatus();
}

// True when every observed shape equals the first.
bool Stable(const Observation& obs) {
  for (const auto& step : obs.step()) {
    if (!std::equal(step.dim().begin(), step.dim().end(),
                    obs.step(0).dim().begin(), obs.step(0).dim().end())) {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<plan::TransferPlan> PromoteStableTensors(
    const plan::TransferPlan& plan, const plan::SizeTrace& trace,
    const TracingOptions& options) {
  if (options.min_steps < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "min_steps ", options.min_steps, " must be at least 1"));
  }
  absl::flat_hash_map<std::string, const Observation*> by_tensor;
  for (const Observation& obs : trace.observation()) {
    if (!by_tensor.emplace(obs.tensor(), &obs).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "trace lists tensor ", obs.tensor(), " twice; merge its steps"));
    }
  }
  plan::TransferPlan out = plan;
  absl::flat_hash_set<std::string> seen_in_plan;
  std::vector<std::string> promoted(plan.promoted_tensor().begin(),
                                    plan.promoted_tensor().end());
  for (plan::LinkRegion& link : *out.mutable_link()) {
    for (plan::TensorSlot& slot : *link.mutable_slot()) {
      seen_in_plan.insert(slot.tensor());
      auto it = by_tensor.find(slot.tensor());
      if (it == by_tensor.end()) continue;
      const Observation& obs = *it->second;
      for (int s = 0; s < obs.step_size(); ++s) {
        RETURN_IF_ERROR(CheckObserved(slot, s, obs.step(s)));
      }
      if (slot.kind() != plan::DYNAMIC || obs.step_size() < options.min_steps ||
          !Stable(obs)) {
        continue;
      }
      TensorSpec spec = MakeSpec(slot.spec().dtype(),
                                 {obs.step(0).dim().begin(),
                                  obs.step(0).dim().end()});
      std::optional<int64_t> bytes = NumBytes(spec);
      if (!bytes.has_value()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "trace of tensor ", slot.tensor(), ": shape ",
            SpecString(spec), " overflows a 64-bit byte count"));
      }
      *slot.mutable_spec() = spec;
      slot.set_kind(plan::STATIC);
      slot.set_bytes(*bytes);
      slot.set_promoted(true);
      promoted.push_back(slot.tensor());
    }
  }
  for (const auto& [tensor, obs] : by_tensor) {
    if (!seen_in_plan.contains(tensor)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "trace names tensor '", tensor,
          "', which the plan does not transfer (expected \"node:k\")"));
    }
  }
  std::sort(promoted.begin(), promoted.end());
  promoted.erase(std::unique(promoted.begin(), promoted.end()),
                 promoted.end());
  out.clear_promoted_tensor();
  for (std::string& t : promoted) out.add_promoted_tensor(std::move(t));
  RETURN_IF_ERROR(LayoutPlan(out));
  return out;
}

}  // namespace rdmaflow::graph
