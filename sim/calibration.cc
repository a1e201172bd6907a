// File: calibration.cc
#include "sim/calibration.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "sim/scenario.h"

namespace rdmaflow::sim {
namespace {

bool Positive(double v) { return std::isfinite(v) && v > 0; }

// UCX over TCP alone (the ping-pong's "tls=tcp") emulates put and get in
// software: the target must call progress (docs/rdma.md). Its shared memory
// on the regions rdmaflow allocates, and RDMA NICs, do not need it.
bool EmulatesOneSided(const results::BenchmarkReport& report) {
  if (report.run().transport() != "ucx") return false;
  for (absl::string_view param : absl::StrSplit(report.run().params(), ',')) {
    if (param == "tls=tcp") return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<LinkProfile> LinkFromPingPong(const std::string& name,
                                             const results::BenchmarkReport& report,
                                             const std::string& source) {
  std::vector<const results::PingPongRow*> writes;
  for (const results::PingPongRow& row : report.pingpong().rows()) {
    if (row.op() != "write") continue;
    if (!Positive(row.bytes()) || !Positive(row.bw_avg_mbps()) ||
        !Positive(row.lat_p50_us()) || !Positive(row.msg_rate_mops())) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": the write row of ", row.bytes(),
          " bytes is not a positive, finite measurement (bandwidth, median "
          "latency and message rate)"));
    }
    writes.push_back(&row);
  }
  if (writes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, " has no ping-pong write rows; write it with "
                "bench/transport_pingpong --json"));
  }
  const auto smallest = *std::min_element(
      writes.begin(), writes.end(),
      [](const auto* a, const auto* b) { return a->bytes() < b->bytes(); });
  // Sustained bandwidth: the largest message's (smaller ones can run from
  // cache, or ride a shaper's burst).
  const auto largest = *std::max_element(
      writes.begin(), writes.end(),
      [](const auto* a, const auto* b) { return a->bytes() < b->bytes(); });
  const double best_mbps = largest->bw_avg_mbps();
  LinkProfile link;
  link.set_name(name);
  link.set_latency_us(smallest->lat_p50_us());
  link.set_bandwidth_gbps(best_mbps / 1000);
  const double message_us = 1 / smallest->msg_rate_mops();
  const double bytes_us = smallest->bytes() / (best_mbps * 1e6) * 1e6;
  link.set_per_message_us(std::max(0.0, message_us - bytes_us));
  link.set_needs_target_progress(EmulatesOneSided(report));
  link.set_source(absl::StrCat("measured: transport_pingpong ", report.run().transport(),
                               " ", report.run().params(), " (", source, ")"));
  return link;
}

absl::StatusOr<std::pair<double, int>> SharedRingFromAllReduce(
    const results::BenchmarkReport& report, const std::string& source) {
  const results::AllReduceRow* largest = nullptr;
  for (const results::AllReduceRow& row : report.allreduce().rows()) {
    if (row.impl() != "rdmaflow" || row.algorithm() != "ring") continue;
    if (largest == nullptr || row.bytes() > largest->bytes()) largest = &row;
  }
  if (largest == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, " has no rdmaflow ring row: run bench/allreduce_bench --impls=rdmaflow "
                "with one rank a host (tools/calibrate_sim.sh does)"));
  }
  const double gbps = largest->busbw_gbps();
  if (!std::isfinite(gbps) || !(gbps > 0) || largest->ranks() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": the ring row of ", largest->bytes(), " bytes has bus bandwidth ", gbps,
        " GB/s over ", largest->ranks(), " ranks; expected a positive figure over 2 or more"));
  }
  return std::make_pair(gbps, static_cast<int>(largest->ranks()));
}

absl::StatusOr<double> UnattendedBytesFromPingPong(const results::BenchmarkReport& report,
                                                   const std::string& source) {
  const results::PingPongRow* largest = nullptr;
  for (const results::PingPongRow& row : report.pingpong().rows()) {
    if (row.op() != "read" || !(row.owner_busy_ms() > 0)) continue;
    if (largest == nullptr || row.bytes() > largest->bytes()) largest = &row;
  }
  if (largest == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, " has no read timed with its owner busy: run bench/transport_pingpong "
                "--owner_busy_ms (tools/calibrate_sim.sh does)"));
  }
  const double bytes = largest->bytes(), idle_us = largest->lat_p50_us();
  const double busy_us = largest->owner_busy_ms() * 1e3, read_us = largest->busy_read_p50_us();
  if (!Positive(bytes) || !Positive(idle_us) || !Positive(read_us) || !std::isfinite(busy_us)) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": the busy-owner read of ", bytes, " bytes has idle time ", idle_us,
        " us and busy time ", read_us, " us; expected finite positive figures"));
  }
  if (bytes < kMinUnattendedBytes) {
    // Its floor would say more crossed than the read held.
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": the largest read timed with its owner busy has ", bytes,
        " bytes, under a page (", kMinUnattendedBytes,
        "); time one of a few MiB (tools/calibrate_sim.sh does)"));
  }
  const double delayed = std::max(0.0, read_us - busy_us) / idle_us;
  // A read delayed by all of its idle time (or more, noise) still had a
  // page in flight; and 0 would read as "not measured".
  return std::max(bytes * std::clamp(1 - delayed, 0.0, 1.0), kMinUnattendedBytes);
}

double MemcpyFromPingPong(const results::BenchmarkReport& report) {
  double bytes = 0, mbps = 0;
  for (const results::PingPongRow& row : report.pingpong().rows()) {
    if (row.bytes() >= bytes && Positive(row.memcpy_mbps())) {
      bytes = row.bytes();
      mbps = row.memcpy_mbps();
    }
  }
  return mbps / 1000;
}

absl::StatusOr<ModelProfile> FindModel(const Calibration& calibration,
                                       const std::string& name) {
  std::vector<std::string> names;
  for (const ModelProfile& model : calibration.models()) {
    if (model.model() == name) return model;
    names.push_back(model.model());
  }
  return absl::NotFoundError(absl::StrCat(
      "the calibration has no profile of model '", name, "' (it has: ",
      names.empty() ? "none" : absl::StrJoin(names, ", "),
      "); profile it with rdmaflow_profile and rerun rdmaflow calibrate"));
}

absl::StatusOr<ModelProfile> FasterCompute(const ModelProfile& model, double speedup) {
  if (!(speedup >= 1e-3 && speedup <= 1e4)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a compute speedup must be in [0.001, 10000], got ", speedup));
  }
  ModelProfile faster = model;
  for (LayerProfile& layer : *faster.mutable_layers()) {
    layer.set_forward_ms(layer.forward_ms() / speedup);
    layer.set_backward_ms(layer.backward_ms() / speedup);
  }
  faster.set_optimizer_ms(model.optimizer_ms() / speedup);
  faster.set_loss_ms(model.loss_ms() / speedup);
  faster.set_step_ms(model.step_ms() / speedup);
  return faster;
}

absl::StatusOr<TimeSharing> TimeSharingFromProfiles(double ranks_per_core,
                                                    const ModelProfile& alone,
                                                    const std::vector<ModelProfile>& copies,
                                                    const std::string& source) {
  if (!(std::isfinite(ranks_per_core) && ranks_per_core > 1 && ranks_per_core <= 1e6)) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": time sharing is measured above one rank a core, got ", ranks_per_core));
  }
  if (copies.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": no profiles of the copies run at once"));
  }
  if (!Positive(alone.step_ms())) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": the profile of model '", alone.model(),
        "' alone has no whole-step time; write it with rdmaflow_profile --json"));
  }
  double sum = 0;
  for (const ModelProfile& copy : copies) {
    if (copy.model() != alone.model() || copy.batch_size() != alone.batch_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": a copy profiled model '", copy.model(), "' at batch ", copy.batch_size(),
          ", not '", alone.model(), "' at batch ", alone.batch_size()));
    }
    if (!Positive(copy.step_ms()) || copy.step_ms() > 1e9) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": a copy's whole-step time is ", copy.step_ms(),
          " ms; it must be positive and finite"));
    }
    sum += copy.step_ms();
  }
  const double mean = sum / static_cast<double>(copies.size());
  const double slowdown = mean / (ranks_per_core * alone.step_ms());
  if (slowdown > 100) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": ", copies.size(), " copies took ", mean, " ms a step against ",
        alone.step_ms(), " ms alone, ", slowdown, "x more than ", ranks_per_core,
        " ranks a core explain; was something else running? (the simulator takes up to 100x)"));
  }
  TimeSharing point;
  point.set_ranks_per_core(ranks_per_core);
  point.set_slowdown(std::max(1.0, slowdown));
  return point;
}

}  // namespace rdmaflow::sim
