// File: convergence.cc
#include "sim/convergence.h"

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace rdmaflow::sim {
namespace {

// More steps than any measured run takes: a larger figure is a bad file.
constexpr int64_t kMaxSteps = 1'000'000'000;

}  // namespace

absl::Status CheckConvergence(const Convergence& convergence) {
  if (convergence.model().empty() || !(convergence.target() > 0 && convergence.target() <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a convergence file needs its model and a target accuracy in (0, 1]; it has model '",
        convergence.model(), "' and target ", convergence.target(),
        " (rerun tools/measure_convergence.sh)"));
  }
  for (int i = 0; i < convergence.points_size(); ++i) {
    const ConvergencePoint& p = convergence.points(i);
    if (p.update_rule().empty() || p.workers() < 1 || p.steps_run() < 0 ||
        p.steps_run() > kMaxSteps || p.steps_to_target() < 0 ||
        p.steps_to_target() > p.steps_run()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "convergence point ", i, " ('", p.spec(), "', ", p.ranks(),
          " ranks) needs an update rule, workers >= 1 and 0 <= steps_to_target <= "
          "steps_run; it has rule '",
          p.update_rule(), "', ", p.workers(), " workers, ", p.steps_to_target(), " of ",
          p.steps_run(), " steps (at most ", kMaxSteps,
          "; rerun tools/measure_convergence.sh)"));
    }
    for (int j = 0; j < i; ++j) {
      const ConvergencePoint& q = convergence.points(j);
      if (q.update_rule() == p.update_rule() && q.workers() == p.workers()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "convergence points ", j, " ('", q.spec(), "', ", q.ranks(), " ranks) and ", i,
            " ('", p.spec(), "', ", p.ranks(), " ranks) both measure rule '", p.update_rule(),
            "' with ", p.workers(), " workers: keep one (they would stand for the same runs)"));
      }
    }
  }
  return absl::OkStatus();
}

const ConvergencePoint* FindConvergence(const Convergence& convergence,
                                        const SimulatedRun& run) {
  if (convergence.model() != run.model()) return nullptr;
  const ConvergencePoint* below = nullptr;  // the most workers <= the run's
  const ConvergencePoint* above = nullptr;  // the fewest workers > the run's
  for (const ConvergencePoint& p : convergence.points()) {
    if (p.update_rule() != run.update_rule()) continue;
    if (p.workers() <= run.workers()) {
      if (below == nullptr || p.workers() > below->workers()) below = &p;
    } else if (above == nullptr || p.workers() < above->workers()) {
      above = &p;
    }
  }
  return below != nullptr ? below : above;
}

void AddTimeToAccuracy(const Convergence& convergence, SimulatedRun* run) {
  const ConvergencePoint* point = FindConvergence(convergence, *run);
  if (point == nullptr) return;
  run->set_convergence_workers(point->workers());
  if (point->steps_to_target() <= 0) return;
  run->set_steps_to_target(point->steps_to_target());
  run->set_time_to_accuracy_s(static_cast<double>(point->steps_to_target()) * run->step_ms() *
                              1e-3);
}

}  // namespace rdmaflow::sim
