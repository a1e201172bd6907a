// File: calibrate_command.cc
#include "cli/calibrate_command.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cli/args.h"
#include "cli/json_file.h"
#include "common/key_value_params.h"
#include "common/program_flags.h"
#include "common/status_macros.h"
#include "results/json.h"
#include "results/results.pb.h"
#include "sim/calibration.h"
#include "sim/sim.pb.h"

namespace rdmaflow::cli {
namespace {

std::vector<FlagSpec> CalibrateFlags() {
  return {{"links"},        {"allreduce"},   {"profiles"},     {"cores"},
          {"store_rtt_us"}, {"burst_bytes"}, {"time_sharing"}, {"wait_cpu"},
          {"moving_cpu"},   {"shared_ring"}, {"unattended"},   {"out"}};
}

std::vector<std::string> List(const std::string& text) {
  return absl::StrSplit(text, ',', absl::SkipEmpty());
}

// --wait_cpu or --moving_cpu (`flag`) LINK=SHARE,...: each share a
// fraction of a core, measured by `tool`.
absl::StatusOr<std::map<std::string, double>> CpuShares(const ParsedArgs& args,
                                                        const std::string& flag,
                                                        const char* tool) {
  ASSIGN_OR_RETURN(auto items, ParseKeyValues(args.Get(flag), absl::StrCat("--", flag, " item")));
  std::map<std::string, double> shares;
  for (const auto& [name, text] : items) {
    double share = -1;
    if (!absl::SimpleAtod(text, &share) || !(share >= 0 && share <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, " ", name, "=", text,
                                                     ": a fraction of a core in [0, 1] (", tool,
                                                     " measures it)"));
    }
    shares[name] = share;
  }
  return shares;
}

constexpr char kWaitCpuTool[] = "tools/wait_cpu.py";
constexpr char kMovingCpuTool[] = "tools/wait_cpu.py --moving";

// A --time_sharing key: ranks a core.
absl::StatusOr<double> SharingRatio(const std::string& text) {
  double ratio = 0;
  if (!absl::SimpleAtod(text, &ratio)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--time_sharing: '", text, "' is not a number of ranks a core"));
  }
  return ratio;
}

// The link of --links named `name` in `calibration`; kInvalidArgument
// naming `flag` when --links does not measure it.
absl::StatusOr<sim::LinkProfile*> MeasuredLink(sim::Calibration& calibration,
                                               const std::string& name, absl::string_view flag) {
  for (sim::LinkProfile& link : *calibration.mutable_links()) {
    if (link.name() == name) return &link;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(flag, " names link '", name, "', which --links does not measure"));
}

// For each NAME=FILE of --`flag`: `fn` with the link --links measured under
// NAME and the benchmark report FILE holds.
absl::Status ForEachLinkReport(
    const ParsedArgs& args, const std::string& flag, sim::Calibration& calibration,
    absl::FunctionRef<absl::Status(sim::LinkProfile&, const results::BenchmarkReport&,
                                   const std::string& path)>
        fn) {
  ASSIGN_OR_RETURN(auto items, ParseKeyValues(args.Get(flag), absl::StrCat("--", flag, " item")));
  for (const auto& [name, path] : items) {
    ASSIGN_OR_RETURN(sim::LinkProfile * link,
                     MeasuredLink(calibration, name, absl::StrCat("--", flag)));
    results::BenchmarkReport report;
    RETURN_IF_ERROR(ReadJsonFile(path, &report));
    RETURN_IF_ERROR(fn(*link, report, path));
  }
  return absl::OkStatus();
}

// The command line's own mistakes, found before any file is read: a usage
// error (exit 2). What the files hold is checked by Run (exit 1).
absl::Status CheckArgs(const ParsedArgs& args) {
  if (!args.Has("out") || args.Get("out").empty()) {
    return absl::InvalidArgumentError("--out FILE is required");
  }
  RETURN_IF_ERROR(args.GetInt("cores", 1, 1, 1 << 16).status());
  RETURN_IF_ERROR(args.GetInt("store_rtt_us", 50, 0, 10000000).status());
  RETURN_IF_ERROR(args.GetInt("burst_bytes", 0, 0, int64_t{1} << 40).status());
  RETURN_IF_ERROR(ParseKeyValues(args.Get("links"), "--links item").status());
  RETURN_IF_ERROR(CpuShares(args, "wait_cpu", kWaitCpuTool).status());
  RETURN_IF_ERROR(CpuShares(args, "moving_cpu", kMovingCpuTool).status());
  RETURN_IF_ERROR(ParseKeyValues(args.Get("shared_ring"), "--shared_ring item").status());
  RETURN_IF_ERROR(ParseKeyValues(args.Get("unattended"), "--unattended item").status());
  ASSIGN_OR_RETURN(auto sharing,
                   ParseKeyValues(args.Get("time_sharing"), "--time_sharing item"));
  for (const auto& [ratio_text, files] : sharing) {
    RETURN_IF_ERROR(SharingRatio(ratio_text).status());
  }
  return absl::OkStatus();
}

absl::Status Run(const ParsedArgs& args, std::ostream& out) {
  sim::Calibration calibration;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  calibration.set_host(host);
  calibration.set_created(absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone()));
  sim::HostProfile* profile = calibration.mutable_host_profile();
  ASSIGN_OR_RETURN(int64_t cores,
                   args.GetInt("cores", std::max(1u, std::thread::hardware_concurrency()), 1, 1 << 16));
  profile->set_cores(static_cast<int>(cores));
  ASSIGN_OR_RETURN(int64_t store_rtt, args.GetInt("store_rtt_us", 50, 0, 10000000));
  profile->set_store_round_trip_us(static_cast<double>(store_rtt));

  ASSIGN_OR_RETURN(int64_t burst, args.GetInt("burst_bytes", 0, 0, int64_t{1} << 40));
  ASSIGN_OR_RETURN(auto links, ParseKeyValues(args.Get("links"), "--links item"));
  for (const auto& [name, path] : links) {
    results::BenchmarkReport report;
    RETURN_IF_ERROR(ReadJsonFile(path, &report));
    ASSIGN_OR_RETURN(sim::LinkProfile link, sim::LinkFromPingPong(name, report, path));
    if (name != "shm") link.set_burst_bytes(static_cast<double>(burst));
    *calibration.add_links() = link;
    if (name == "shm" && profile->memcpy_gbps() == 0) {
      profile->set_memcpy_gbps(sim::MemcpyFromPingPong(report));
    }
    out << "link " << name << ": latency " << link.latency_us() << " us, "
        << link.bandwidth_gbps() << " GB/s, " << link.per_message_us()
        << " us a message\n";
  }
  ASSIGN_OR_RETURN(auto wait_cpu, CpuShares(args, "wait_cpu", kWaitCpuTool));
  for (const auto& [name, share] : wait_cpu) {
    ASSIGN_OR_RETURN(sim::LinkProfile * link, MeasuredLink(calibration, name, "--wait_cpu"));
    link->set_wait_cpu(share);
    out << "link " << name << ": a waiting rank uses " << share << " of a core\n";
  }
  ASSIGN_OR_RETURN(auto moving_cpu, CpuShares(args, "moving_cpu", kMovingCpuTool));
  for (const auto& [name, share] : moving_cpu) {
    ASSIGN_OR_RETURN(sim::LinkProfile * link, MeasuredLink(calibration, name, "--moving_cpu"));
    link->set_moving_cpu(share);
    out << "link " << name << ": a rank moving data uses " << share << " of a core\n";
  }
  RETURN_IF_ERROR(ForEachLinkReport(
      args, "shared_ring", calibration,
      [&](sim::LinkProfile& link, const results::BenchmarkReport& report,
          const std::string& path) -> absl::Status {
        ASSIGN_OR_RETURN(const auto ring, sim::SharedRingFromAllReduce(report, path));
        link.set_shared_ring_gbps(ring.first);
        link.set_shared_ring_ranks(ring.second);
        out << "link " << link.name() << ": a ring of " << ring.second
            << " ranks sharing the cores moves " << ring.first << " GB/s\n";
        return absl::OkStatus();
      }));
  RETURN_IF_ERROR(ForEachLinkReport(
      args, "unattended", calibration,
      [&](sim::LinkProfile& link, const results::BenchmarkReport& report,
          const std::string& path) -> absl::Status {
        ASSIGN_OR_RETURN(const double bytes, sim::UnattendedBytesFromPingPong(report, path));
        link.set_unattended_bytes(bytes);
        out << "link " << link.name() << ": a busy owner's socket carries " << bytes
            << " bytes of a read on alone\n";
        return absl::OkStatus();
      }));
  if (args.Has("allreduce")) {
    results::BenchmarkReport report;
    RETURN_IF_ERROR(ReadJsonFile(args.Get("allreduce"), &report));
    const results::AllReduceResults& r = report.allreduce();
    if (!(r.memcpy_gbps() > 0 && r.reduce_gbps() > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          args.Get("allreduce"), " has no memcpy_gbps and reduce_gbps; write it with "
                                 "bench/allreduce_bench --json"));
    }
    profile->set_memcpy_gbps(r.memcpy_gbps());
    profile->set_reduce_gbps(r.reduce_gbps());
    for (const results::AllReduceRow& row : r.rows()) {
      if (row.impl() == "rdmaflow" && row.ranks() == 2 && std::isfinite(row.setup_ms()) &&
          row.setup_ms() > 0) {
        profile->set_group_setup_ms(row.setup_ms());
      }
    }
  }
  if (!(profile->memcpy_gbps() > 0) || !std::isfinite(profile->memcpy_gbps())) {
    return absl::InvalidArgumentError(
        "no memcpy bandwidth: give --allreduce (bench/allreduce_bench --json) or a shm link "
        "in --links");
  }
  if (profile->reduce_gbps() == 0) profile->set_reduce_gbps(profile->memcpy_gbps() / 2);
  out << "host: " << profile->cores() << " cores, memcpy " << profile->memcpy_gbps()
      << " GB/s, reduce " << profile->reduce_gbps() << " GB/s, store round trip "
      << profile->store_round_trip_us() << " us, group set-up "
      << profile->group_setup_ms() << " ms\n";
  for (const std::string& path : List(args.Get("profiles"))) {
    sim::ModelProfile model;
    RETURN_IF_ERROR(ReadJsonFile(path, &model));
    if (model.layers().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " has no layers; write it with rdmaflow_profile --json"));
    }
    out << "model " << model.model() << ": " << model.layers_size() << " parts, step "
        << model.step_ms() << " ms at batch " << model.batch_size() << "\n";
    *calibration.add_models() = model;
  }
  ASSIGN_OR_RETURN(auto sharing,
                   ParseKeyValues(args.Get("time_sharing"), "--time_sharing item"));
  std::vector<sim::TimeSharing> points;
  for (const auto& [ratio_text, files] : sharing) {
    ASSIGN_OR_RETURN(const double ratio, SharingRatio(ratio_text));
    std::vector<sim::ModelProfile> copies;
    for (absl::string_view path : absl::StrSplit(files, ':', absl::SkipEmpty())) {
      RETURN_IF_ERROR(ReadJsonFile(std::string(path), &copies.emplace_back()));
    }
    if (copies.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--time_sharing ", ratio_text, "= names no profile"));
    }
    const sim::ModelProfile* alone = nullptr;
    for (const sim::ModelProfile& m : calibration.models()) {
      if (m.model() == copies.front().model()) alone = &m;
    }
    if (alone == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--time_sharing ", ratio_text, "=: model '", copies.front().model(),
          "' is not in --profiles (its profile alone is the baseline)"));
    }
    ASSIGN_OR_RETURN(sim::TimeSharing point,
                     sim::TimeSharingFromProfiles(ratio, *alone, copies,
                                                  absl::StrCat("--time_sharing ", ratio_text)));
    out << "time sharing: " << point.ranks_per_core() << " ranks a core, compute "
        << point.slowdown() << "x slower than shared evenly (" << copies.size()
        << " copies of " << alone->model() << ")\n";
    points.push_back(point);
  }
  std::sort(points.begin(), points.end(), [](const auto& a, const auto& b) {
    return a.ranks_per_core() < b.ranks_per_core();
  });
  for (size_t i = 0; i < points.size(); ++i) {
    if (i > 0 && points[i].ranks_per_core() == points[i - 1].ranks_per_core()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--time_sharing names ", points[i].ranks_per_core(), " ranks a core twice"));
    }
    *profile->add_time_sharing() = points[i];
  }
  RETURN_IF_ERROR(results::WriteJsonFile(calibration, args.Get("out")));
  out << "wrote " << args.Get("out") << "\n";
  return absl::OkStatus();
}

}  // namespace

std::string CalibrateUsage() {
  return R"(usage: rdmaflow calibrate --out FILE [options]

Builds the step-time simulator's calibration (JSON, sim/sim.proto's
Calibration) from this machine's measurements. tools/calibrate_sim.sh runs
them all and then this; see docs/scale.md.

options:
  --links NAME=FILE,...   ping-pong reports (bench/transport_pingpong --json),
                          one per link: shm=pp_shm.json,1gbit=pp_1g.json
  --allreduce FILE        the collectives' bench report (bench/allreduce_bench
                          --json): the host's memcpy and reduce bandwidth
                          (default: memcpy from the shm ping-pong, reduce half)
                          and a 2-rank group's set-up time
  --profiles FILE,...     model profiles (rdmaflow_profile --json)
  --burst_bytes N         the shaper's burst on every link but shm (the
                          namespace hosts' tc tbf: 262144; default 0)
  --time_sharing K=F:F:...,...
                          time sharing: profiles (rdmaflow_profile --json) of
                          one model taken at once, K ranks a core, against
                          that model's profile in --profiles
  --wait_cpu NAME=F,...   the fraction of a core a rank waiting on a link
                          uses (tools/wait_cpu.py), per link of --links
  --moving_cpu NAME=F,... the fraction of a core a rank uses while data it
                          sends or receives moves over a link
                          (tools/wait_cpu.py --moving), per link of --links
  --shared_ring NAME=FILE,...
                          a ring all-reduce across namespace hosts that
                          share the cores (bench/allreduce_bench --json, one
                          rank a host), per link of --links: its bus
                          bandwidth caps the simulator's rings there
  --unattended NAME=FILE,...
                          reads timed with their owner computing
                          (bench/transport_pingpong --owner_busy_ms --json),
                          per link of --links: how much of a read the
                          owner's socket carries on without its progress
  --cores N               cores the ranks of one host share (default: this
                          machine's)
  --store_rtt_us N        one rendezvous-store round trip on one host
                          (default 50; tools/store_rtt.py measures it)
  --out FILE              where to write the calibration
  -h, --help              this text

exit status: 0 written; 1 a measurement cannot be read or is invalid (the
message names the file); 2 bad command line.
)";
}

int RunCalibrateCommand(const std::vector<std::string>& args, std::ostream& out,
                        std::ostream& err) {
  absl::StatusOr<ParsedArgs> parsed = ParseArgs(args, CalibrateFlags());
  if (!parsed.ok()) {
    err << "rdmaflow calibrate: " << parsed.status().message() << "\n";
    return 2;
  }
  if (parsed->help) {
    out << CalibrateUsage();
    return 0;
  }
  if (!parsed->positional.empty()) {
    err << "rdmaflow calibrate: takes no positional arguments (see --help)\n";
    return 2;
  }
  if (const absl::Status usage = CheckArgs(*parsed); !usage.ok()) {
    err << "rdmaflow calibrate: " << usage.message()
        << " (see rdmaflow calibrate --help)\n";
    return kExitUsage;
  }
  const absl::Status status = Run(*parsed, out);
  if (!status.ok()) {
    err << "rdmaflow calibrate: " << status.message() << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace rdmaflow::cli
