// File: simulate_command.cc
#include "cli/simulate_command.h"

#include <filesystem>
#include <map>
#include <optional>
#include <system_error>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "cli/args.h"
#include "cli/data_file.h"
#include "cli/json_file.h"
#include "common/key_value_params.h"
#include "common/status_macros.h"
#include "common/text_table.h"
#include "results/json.h"
#include "sim/calibration.h"
#include "sim/convergence.h"
#include "sim/link_presets.h"
#include "sim/simulate.h"

namespace rdmaflow::cli {
namespace {

// Where tools/calibrate_sim.sh writes this machine's calibration (and where
// the repository keeps the one docs/scale.md was made with).
constexpr char kDefaultCalibration[] = "docs/scale/calibration.json";
// Where tools/measure_convergence.sh writes the measured steps to accuracy,
// beside the default calibration (and used only with it).
constexpr char kDefaultConvergenceName[] = "convergence.json";

std::vector<FlagSpec> SimulateFlags() {
  return {{"calibration"}, {"convergence"}, {"model"},  {"strategy"},
          {"ranks"},       {"link"},       {"ranks_per_host"}, {"cores"}, {"shared_cores"},
          {"steps"},       {"slow_rank"},  {"slow_factor"}, {"jitter"},
          {"kill_rank"},   {"kill_step"},  {"seed"},      {"json"},
          {"compute_speedup"}, {"quiet", false}};
}

std::vector<std::string> List(const std::string& text) {
  return absl::StrSplit(text, ',', absl::SkipEmpty());
}

absl::StatusOr<double> Real(const ParsedArgs& args, const std::string& name, double fallback) {
  if (!args.Has(name)) return fallback;
  double v;
  if (!absl::SimpleAtod(args.Get(name), &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " must be a number, got '", args.Get(name), "'"));
  }
  return v;
}

// The command line, checked before any file is read (errors: exit 2).
struct SimulateOptions {
  std::string calibration;
  std::string convergence;  // empty: the default file where it exists
  std::string model;
  std::vector<std::pair<std::string, std::map<std::string, std::string>>> strategies;
  std::vector<int> rank_counts;
  std::vector<std::string> links;
  int cores = 0;  // 0: the calibration's
  double compute_speedup = 1;
  int ranks_per_host = 1;
  std::string json;
  bool quiet = false;
  sim::Scenario base;  // steps, straggler, churn, seed, shared cores
};

absl::StatusOr<SimulateOptions> ParseOptions(const ParsedArgs& args) {
  SimulateOptions f;
  f.calibration = args.Get("calibration");
  f.convergence = args.Get("convergence");
  if (args.Has("convergence") && f.convergence.empty()) {
    return absl::InvalidArgumentError("--convergence needs a file name (or none)");
  }
  f.model = args.Get("model", "lenet5");
  f.json = args.Get("json");
  f.quiet = args.Has("quiet");
  ASSIGN_OR_RETURN(int64_t cores, args.GetInt("cores", 0, 1, 1 << 16));
  f.cores = static_cast<int>(cores);
  ASSIGN_OR_RETURN(int64_t per_host, args.GetInt("ranks_per_host", 1, 1, 1 << 20));
  f.ranks_per_host = static_cast<int>(per_host);
  sim::Scenario& base = f.base;
  ASSIGN_OR_RETURN(int64_t shared_cores, args.GetInt("shared_cores", 0, 0, 1 << 16));
  base.shared_cores = static_cast<int>(shared_cores);
  ASSIGN_OR_RETURN(int64_t steps, args.GetInt("steps", 30, 1, 100000));
  base.steps = static_cast<int>(steps);
  ASSIGN_OR_RETURN(int64_t slow_rank, args.GetInt("slow_rank", -1, -1, 1 << 20));
  base.slow_rank = static_cast<int>(slow_rank);
  ASSIGN_OR_RETURN(base.slow_factor, Real(args, "slow_factor", 1));
  if (!(base.slow_factor >= 1 && base.slow_factor <= 1000)) {
    return absl::InvalidArgumentError("--slow_factor must be in 1..1000");
  }
  ASSIGN_OR_RETURN(f.compute_speedup, Real(args, "compute_speedup", 1));
  if (!(f.compute_speedup >= 1e-3 && f.compute_speedup <= 1e4)) {
    return absl::InvalidArgumentError("--compute_speedup must be in [0.001, 10000]");
  }
  ASSIGN_OR_RETURN(base.jitter, Real(args, "jitter", 0));
  if (!(base.jitter >= 0 && base.jitter < 1)) {
    return absl::InvalidArgumentError("--jitter must be in [0, 1)");
  }
  if (args.Has("json") && f.json.empty()) {
    return absl::InvalidArgumentError("--json needs a file name");
  }
  ASSIGN_OR_RETURN(int64_t kill_rank, args.GetInt("kill_rank", -1, -1, 1 << 20));
  base.kill_rank = static_cast<int>(kill_rank);
  ASSIGN_OR_RETURN(int64_t kill_step, args.GetInt("kill_step", 0, 0, 1 << 30));
  base.kill_step = static_cast<int>(kill_step);
  ASSIGN_OR_RETURN(int64_t seed, args.GetInt("seed", 1, 0, INT64_MAX));
  base.seed = static_cast<uint64_t>(seed);
  for (const std::string& item : List(args.Get("ranks", "4"))) {
    int n;
    if (!absl::SimpleAtoi(item, &n) || n < 1 || n > (1 << 20)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--ranks takes counts in 1..1048576, got '", item, "'"));
    }
    f.rank_counts.push_back(n);
  }
  // "ps:servers=1,sync=bsp;allreduce": name and settings, ';' between.
  for (absl::string_view item :
       absl::StrSplit(args.Get("strategy", "allreduce"), ';', absl::SkipEmpty())) {
    std::pair<std::string, std::string> parts = absl::StrSplit(item, absl::MaxSplits(':', 1));
    ASSIGN_OR_RETURN(auto settings,
                     ParseKeyValues(parts.second, absl::StrCat(parts.first, " setting")));
    f.strategies.emplace_back(parts.first, settings);
  }
  f.links = List(args.Get("link", "shm"));
  if (f.rank_counts.empty() || f.strategies.empty() || f.links.empty()) {
    return absl::InvalidArgumentError("--ranks, --strategy and --link need at least one value");
  }
  return f;
}

absl::Status Run(const SimulateOptions& f, std::ostream& out, std::ostream& err) {
  std::string path = f.calibration;
  if (path.empty()) {
    std::optional<std::string> found = FindDataFile(kDefaultCalibration);
    if (!found.has_value()) {
      return absl::NotFoundError(absl::StrCat(
          "no --calibration FILE, and no ", kDefaultCalibration,
          " in this folder, the bazel workspace or above the rdmaflow binary: "
          "pass the file, or run tools/calibrate_sim.sh"));
    }
    path = *found;
  }
  sim::Calibration calibration;
  RETURN_IF_ERROR(ReadJsonFile(path, &calibration));
  ASSIGN_OR_RETURN(sim::ModelProfile measured, sim::FindModel(calibration, f.model));
  ASSIGN_OR_RETURN(sim::ModelProfile model, sim::FasterCompute(measured, f.compute_speedup));
  sim::Scenario base = f.base;
  base.model = model;
  base.host = sim::HostOf(calibration);
  if (f.cores > 0) base.host.set_cores(f.cores);
  ASSIGN_OR_RETURN(sim::LinkProfile shm, sim::FindLink(calibration, "shm"));

  sim::Convergence convergence;
  std::string convergence_path = f.convergence;
  if (convergence_path.empty() && f.calibration.empty()) {
    // The default calibration's: measured on the machine it describes.
    const std::filesystem::path beside =
        std::filesystem::path(path).parent_path() / kDefaultConvergenceName;
    std::error_code error;
    if (std::filesystem::is_regular_file(beside, error)) convergence_path = beside.string();
  }
  if (convergence_path == "none") convergence_path.clear();
  if (!convergence_path.empty()) {
    absl::Status read = ReadJsonFile(convergence_path, &convergence);
    if (read.ok()) read = sim::CheckConvergence(convergence);
    if (read.ok() && convergence.model() == model.model() && convergence.batch() > 0 &&
        convergence.batch() != model.batch_size()) {
      read = absl::InvalidArgumentError(absl::StrCat(
          "the convergence of ", model.model(), " was measured at batch ", convergence.batch(),
          " a rank; the calibration profiled batch ", model.batch_size(),
          ": measure both at one batch"));
    }
    if (!read.ok()) {
      return absl::Status(
          read.code(), absl::StrCat(read.message(), f.convergence.empty()
                                                        ? " (the default convergence file; "
                                                          "--convergence none leaves it out)"
                                                        : ""));
    }
  }

  sim::SimulationReport report;
  report.set_calibration(path);
  report.set_convergence(convergence_path);
  TextTable table({"link", "strategy", "params", "ranks", "step_ms", "comm_ms", "wait_ms",
                   "wire_MB/step", "samples/s", "to_acc_s"});
  bool any_time_to_accuracy = false;
  for (const std::string& link_name : f.links) {
    ASSIGN_OR_RETURN(sim::LinkProfile link, sim::FindLink(calibration, link_name));
    for (const auto& [strategy, settings] : f.strategies) {
      for (int ranks : f.rank_counts) {
        sim::Scenario s = base;
        s.strategy = strategy;
        s.params = settings;
        s.ranks = ranks;
        s.local = shm;
        if (link_name == "shm") {
          s.network = shm;
          s.ranks_per_host = ranks;  // one host
        } else {
          s.network = link;
          s.ranks_per_host = f.ranks_per_host;
        }
        if (!f.quiet && ranks >= 256) {
          err << "simulating " << strategy << " on " << ranks << " ranks over " << link_name
              << " ...\n";
        }
        absl::StatusOr<sim::SimulatedRun> run = sim::Simulate(s);
        if (!run.ok()) {
          return absl::Status(run.status().code(),
                              absl::StrCat(strategy, " on ", ranks, " ranks over ", link_name,
                                           ": ", run.status().message()));
        }
        sim::AddTimeToAccuracy(convergence, &*run);
        any_time_to_accuracy |= run->time_to_accuracy_s() > 0;
        table.AddRow({link_name, strategy, run->params().empty() ? "-" : run->params(),
                      absl::StrCat(ranks), absl::StrFormat("%.2f", run->step_ms()),
                      absl::StrFormat("%.2f", run->comm_ms()),
                      absl::StrFormat("%.2f", run->wait_ms()),
                      absl::StrFormat("%.2f", run->wire_bytes_per_step() / 1e6),
                      absl::StrFormat("%.0f", run->samples_per_s()),
                      run->time_to_accuracy_s() > 0
                          ? absl::StrFormat("%.1f", run->time_to_accuracy_s())
                          : "-"});
        *report.add_runs() = *run;
      }
    }
  }
  out << "model " << model.model() << " (batch " << model.batch_size() << "), "
      << base.host.cores() << " cores a host"
      << (f.compute_speedup != 1
              ? absl::StrFormat(" computing %gx as fast as the calibration's", f.compute_speedup)
              : "")
      << ", " << base.steps << " steps; calibration "
      << path << "\n"
      << table.Render("  ");
  if (any_time_to_accuracy) {
    out << "to_acc_s: step_ms x the steps a measured run of the same update rule needed to "
           "reach "
        << absl::StrFormat("%.0f", convergence.target() * 100) << " % test accuracy ("
        << convergence_path
        << "; the run with the most workers up to the row's, else the fewest above)\n";
  }
  if (!f.json.empty()) RETURN_IF_ERROR(results::WriteJsonFile(report, f.json));
  return absl::OkStatus();
}

}  // namespace

std::string SimulateUsage() {
  return R"(usage: rdmaflow simulate [options]

Predicts rdmaflow's training step per strategy, rank count and link, from a
calibration of this machine (rdmaflow calibrate; tools/calibrate_sim.sh).
A discrete-event model of each strategy as its code runs it: compute queued
on each host's cores, messages on each rank's ports, waits and collectives
(docs/scale.md says what is modelled and how well it matches runs).

options:
  --calibration FILE   default docs/scale/calibration.json, looked for in
                       this folder, the workspace of `bazel run`, then the
                       folders above the rdmaflow binary
  --convergence FILE   measured steps to a target accuracy per update rule
                       (tools/measure_convergence.sh); adds the time to
                       accuracy (to_acc_s) where the model and rule were
                       measured. Default: with the default calibration,
                       the convergence.json beside it; none: leave it out
  --model NAME         a model the calibration profiled (default lenet5)
  --strategy S;...     strategies, each NAME[:K=V,...], ';' between: ps,
                       allreduce, layer_separated, gossip, moshpit (default
                       allreduce), with their settings as rdmaflow_train
                       takes them (ps: servers=1,sync=bsp|asp|ssp:S|dssp:L:H,
                       overlap=off|on,slice_bytes=auto|B; layer_separated:
                       fc_ranks=K,overlap=off|on; gossip: mode=pull|push,
                       period=N, topology=random|ring, overlap=off|on;
                       moshpit: side=M, dims=D, period=N, group_timeout_ms=T,
                       overlap=off|on; allreduce: bucket_bytes=B,
                       chunk_bytes=B, overlap=on|off|forward,
                       forward_bytes=auto|B)
  --ranks N,...        rank counts (default 4)
  --link NAME,...      shm (every rank on one host), 100mbit, 1gbit, 10gbit,
                       25gbit, roce25, roce100, ib_edr100, ib_hdr200, or a
                       link the calibration measured (default shm)
  --ranks_per_host N   over a network link: ranks on each host (default 1)
  --cores N            cores of a host (default: the calibration's)
  --compute_speedup F  hosts compute F times as fast as the calibration's
                       core (an accelerator, say): every layer, loss and
                       optimizer time divided by F (default 1)
  --shared_cores N     every host's ranks share N cores: namespace hosts on
                       one machine, as tools/validate_sim.sh runs them
  --steps N            steps to simulate (default 30)
  --slow_rank R        a straggler: its compute is --slow_factor times slower
  --slow_factor F
  --jitter J           every compute varies uniformly by +-J (0 <= J < 1)
  --kill_rank R        churn: rank R is gone from --kill_step on
  --kill_step N
  --seed N             random choices (peers, jitter); default 1
  --json FILE          write the rows (sim/sim.proto's SimulationReport)
  --quiet              no progress lines
  -h, --help           this text

exit status: 0 simulated; 1 a file cannot be read or a scenario cannot run
(the message names it); 2 bad command line.

example:
  rdmaflow simulate --model vgg \
      --strategy 'ps:servers=1,sync=bsp;allreduce;layer_separated' \
      --ranks 4,16,64 --link 1gbit,ib_hdr200
)";
}

int RunSimulateCommand(const std::vector<std::string>& args, std::ostream& out,
                       std::ostream& err) {
  absl::StatusOr<ParsedArgs> parsed = ParseArgs(args, SimulateFlags());
  if (!parsed.ok()) {
    err << "rdmaflow simulate: " << parsed.status().message() << "\n";
    return 2;
  }
  if (parsed->help) {
    out << SimulateUsage();
    return 0;
  }
  if (!parsed->positional.empty()) {
    err << "rdmaflow simulate: takes no positional arguments (see --help)\n";
    return 2;
  }
  absl::StatusOr<SimulateOptions> flags = ParseOptions(*parsed);
  if (!flags.ok()) {
    err << "rdmaflow simulate: " << flags.status().message() << "\n";
    return 2;
  }
  const absl::Status status = Run(*flags, out, err);
  if (!status.ok()) {
    err << "rdmaflow simulate: " << status.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace rdmaflow::cli
