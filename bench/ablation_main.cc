// ablation: the RPC-vs-RDMA ablation. Replays the communication of training
// graphs (no compute, or a fixed compute delay) between real processes for N
// steps through each communicator -- rdma (zero copy), rdma_copy (two-sided
// messages with a copy on each side over the same fabric) and grpc
// (protobuf over gRPC/TCP) -- and reports step time p50/p99, bytes/s,
// copies per step and the ratio to zero copy; then sweeps one tensor of
// 4 KiB .. 64 MiB, next to single-thread memcpy measured in the same run.
//
//   ablation --graphs=vgg_fc,small_tensors --steps=20 --json=out.json
//
// Each (graph, communicator) is one local job: this process is rank 0 and
// starts the other ranks (launch/launcher.h).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/ablation_graphs.h"
#include "bench/line_probe.h"
#include "bench/pingpong.h"
#include "bench/run_length.h"
#include "bench/step_statistics.h"
#include "common/program_flags.h"
#include "common/status_macros.h"
#include "common/text_table.h"
#include "graph_analyzer/planner.h"
#include "launch/launcher.h"
#include "launch/rank.h"
#include "onesided/progress/wait_policy.h"
#include "rdma/builtin_transports.h"
#include "rdma/transport_registry.h"
#include "runtime/communicator_factory.h"
#include "runtime/replay.h"
#include "results/json.h"
#include "results/results.pb.h"
#include "results/run_info.h"

ABSL_FLAG(std::string, graphs, "all",
          "Comma-separated graphs to replay (mlp, cnn_ps, cnn_layer_separated, "
          "seq, vgg_fc, small_tensors), 'all', or 'none'.");
ABSL_FLAG(std::string, communicators, "rdma,rdma_copy,grpc",
          "Comma-separated communicators to compare; `time / rdma` divides by the first. An "
          "entry may set transport parameters for its own runs, each after a '+', beside or in "
          "place of --params' own: rdma_copy+streaming_copy_kb=0 is rdma_copy with plain "
          "copies into a same-host peer.");
ABSL_FLAG(int32_t, steps, 20, "Measured steps per run.");
ABSL_FLAG(int32_t, warmup, 4,
          "Steps before measuring (checked byte for byte; includes dynamic "
          "tracing).");
ABSL_FLAG(double, min_time_s, 0.2,
          "Each run times at least this long where --steps (--sweep_steps) "
          "would end sooner: rank 0 times 16 steps after the warm-up, and "
          "every rank then runs the steps that take, at most 100 times the "
          "flag's (0: exactly --steps). A few hundred microseconds of steps "
          "say nothing on a shared machine, where one preemption takes "
          "milliseconds.");
ABSL_FLAG(bool, sweep, true, "Also sweep one tensor over sizes.");
ABSL_FLAG(int32_t, sweep_steps, 100, "Measured steps per sweep size.");
ABSL_FLAG(int64_t, sweep_min, 4096, "Smallest sweep size in bytes.");
ABSL_FLAG(int64_t, sweep_max, int64_t{64} << 20, "Largest sweep size in bytes.");
ABSL_FLAG(int64_t, compute_delay_us, 0,
          "Busy time per step standing in for compute, in microseconds.");
ABSL_FLAG(int32_t, pipeline_depth, 2,
          "Buffers per receive slot in the zero-copy plan, 1..16 (the "
          "planner's pipeline_depth): how many steps a sender may run ahead "
          "of its receiver.");
ABSL_FLAG(std::string, transport, "ucx", "rdmaflow transport (ucx, ibverbs).");
ABSL_FLAG(std::string, params, "tls=shm", "Transport parameters, key=value,...");
ABSL_FLAG(std::string, json, "", "Write the results as JSON here.");
ABSL_FLAG(std::string, wait, "adaptive",
          "How a waiting rank idles, every communicator's: adaptive, spin, yield, or "
          "adaptive:spin=N,yield_us=N,sleep_us=N,events=0|1,announced=0|1 "
          "(onesided/progress/wait_policy.h).");
ABSL_FLAG(std::string, tsv, "",
          "Write TSV for tools/plot_ablation.sh here (<path>.graphs: each "
          "graph's median of block means in ms; <path>.sweep: GB/s).");
ABSL_FLAG(std::string, trace_dir, "",
          "Write a Chrome trace (chrome://tracing, Perfetto) of every transfer "
          "of each rank of the zero-copy runs here: "
          "<graph>.rdma.rank<r>.json.");
ABSL_FLAG(std::string, job, "", "(internal) the job a launched rank runs.");

namespace rdmaflow::bench {
namespace {

// The result records (results/results.proto) of one (graph, communicator)
// run and of one sweep size's runs (bench::AblationGraph is the graph
// itself; results::AblationGraph its runs).
using results::AblationRankResult;
using results::AblationRun;
using results::AblationSweepPoint;
using Runs = google::protobuf::RepeatedPtrField<AblationRun>;

// The steps of a run are cut into up to this many blocks of at least
// kMinBlockSteps steps for the median of block means
// (bench/step_statistics.h) that "time / rdma" compares: a block spans
// rdma_copy's run-ahead of up to 8 messages (fewer, longer blocks for short
// runs; one block, the mean, under 32 steps).
constexpr int kStatisticBlocks = 10;
constexpr int kMinBlockSteps = 16;
// --min_time_s: the steps rank 0 times to choose the step count
// (bench/run_length.h).
constexpr int kCalibrationSteps = 16;

absl::StatusOr<graph::GraphDef> FindGraph(const std::string& name) {
  int64_t bytes = 0;
  if (absl::SimpleAtoi(name, &bytes)) return SingleTensor(bytes);
  for (AblationGraph& g : AblationGraphs()) {
    if (g.name == name) return std::move(g.graph);
  }
  std::vector<std::string> names;
  for (const AblationGraph& g : AblationGraphs()) names.push_back(g.name);
  return absl::NotFoundError(absl::StrCat("unknown graph '", name,
                                          "'; known: ", absl::StrJoin(names, ", ")));
}

graph::PlannerOptions PlannerFlags() {
  graph::PlannerOptions options;
  options.pipeline_depth = absl::GetFlag(FLAGS_pipeline_depth);
  return options;
}

// One entry of --communicators: the communicator and the transport
// parameters of its runs: --params, each key=value the entry gives after a
// '+' added or, for a key --params has, in its place.
struct CommunicatorEntry {
  std::string name;
  std::string params;
};

// kInvalidArgument naming the entry where --params or a '+' part is not
// key=value.
absl::StatusOr<CommunicatorEntry> ParseCommunicatorEntry(absl::string_view entry) {
  std::vector<std::string> parts = absl::StrSplit(entry, '+');
  using Params = std::map<std::string, std::string>;
  ASSIGN_OR_RETURN(Params params, rdma::ParseTransportParams(absl::GetFlag(FLAGS_params)));
  for (size_t i = 1; i < parts.size(); ++i) {
    absl::StatusOr<std::map<std::string, std::string>> part =
        rdma::ParseTransportParams(parts[i]);
    if (!part.ok() || part->size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", parts[i], "' in --communicators entry '", entry,
          "' is not one transport parameter key=value"));
    }
    params[part->begin()->first] = part->begin()->second;
  }
  std::vector<std::string> pairs;
  for (const auto& [key, value] : params) pairs.push_back(absl::StrCat(key, "=", value));
  return CommunicatorEntry{parts[0], absl::StrJoin(pairs, ",")};
}

// Runs one rank of job "<graph>|<communicator entry>"; every rank publishes
// its step times and counter deltas (an AblationRankResult); rank 0 gathers
// them into `result`.
absl::Status RunJobRank(int rank, int world_size, rdma::Store& store,
                        const std::string& job, AblationRun* result) {
  std::vector<std::string> parts = absl::StrSplit(job, '|');
  if (parts.size() != 2) return absl::InvalidArgumentError("bad --job");
  ASSIGN_OR_RETURN(graph::GraphDef graph, FindGraph(parts[0]));
  ASSIGN_OR_RETURN(plan::TransferPlan plan, graph::PlanGraph(graph, PlannerFlags()));
  if (plan.world_size() != world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "graph ", parts[0], " needs ", plan.world_size(), " ranks"));
  }
  ASSIGN_OR_RETURN(const CommunicatorEntry entry, ParseCommunicatorEntry(parts[1]));
  ASSIGN_OR_RETURN(auto transport,
                   rdma::CreateBuiltinTransport(absl::GetFlag(FLAGS_transport), entry.params,
                                                rank));
  runtime::CommunicatorOptions options;
  options.ns = "ablation";
  options.timeout = absl::Seconds(120);
  ASSIGN_OR_RETURN(options.wait, onesided::WaitPolicy::Parse(absl::GetFlag(FLAGS_wait)));
  if (const std::string dir = absl::GetFlag(FLAGS_trace_dir); !dir.empty()) {
    options.trace_path =
        absl::StrCat(dir, "/", parts[0], ".", parts[1], ".rank", rank, ".json");
  }
  ASSIGN_OR_RETURN(auto communicator,
                   runtime::CreateCommunicator(entry.name, plan, *transport,
                                               store, options));
  runtime::ReplayOptions replay;
  replay.vary_content = false;
  replay.compute_delay = absl::Microseconds(absl::GetFlag(FLAGS_compute_delay_us));
  // The zero-copy sender builds its tensors in registered memory, as
  // runtime/torch's allocator makes LibTorch do.
  std::unique_ptr<rdma::MemoryRegion> arena;
  if (communicator->SendsInPlace()) {
    ASSIGN_OR_RETURN(auto probe, runtime::Replayer::Create(plan, rank, {}));
    uint64_t send_bytes = 0;
    for (const runtime::TransferInfo& info : probe->rank_plan().sends()) {
      send_bytes += info.data_bytes + 64;
    }
    ASSIGN_OR_RETURN(rdma::MemoryRegion region,
                     transport->Allocate(2 * send_bytes + (size_t{4} << 20)));
    arena = std::make_unique<rdma::MemoryRegion>(std::move(region));
    communicator->AddSendArena(arena.get());
    replay.arena = arena.get();
  }
  ASSIGN_OR_RETURN(auto replayer, runtime::Replayer::Create(plan, rank, replay));
  const int warmup = absl::GetFlag(FLAGS_warmup);
  int64_t sweep_bytes = 0;
  const int flag_steps = absl::SimpleAtoi(parts[0], &sweep_bytes)
                             ? absl::GetFlag(FLAGS_sweep_steps)
                             : absl::GetFlag(FLAGS_steps);
  int64_t step = 0;
  for (; step < warmup; ++step) {
    RETURN_IF_ERROR(replayer->RunStep(*communicator, step).status());
  }
  // Warm-up steps are checked byte for byte; the steps after them read each
  // received tensor once (as its consumer would), under every communicator
  // alike.
  replayer->set_verify(false);
  int steps = flag_steps;
  if (const double min_time_s = absl::GetFlag(FLAGS_min_time_s); min_time_s > 0) {
    const absl::Time begin = absl::Now();
    for (int i = 0; i < kCalibrationSteps; ++i, ++step) {
      RETURN_IF_ERROR(replayer->RunStep(*communicator, step).status());
    }
    const std::string key = "ablation/steps";
    if (rank == 0) {
      steps = StepsFor(flag_steps, min_time_s, (absl::Now() - begin) / kCalibrationSteps);
      RETURN_IF_ERROR(store.Set(key, absl::StrCat(steps)));
    } else {
      // Rank 0's choice, read once and checked before it is used.
      ASSIGN_OR_RETURN(std::string value, store.Get(key, options.timeout));
      ASSIGN_OR_RETURN(steps, ParseAgreedSteps(key, value, flag_steps));
    }
  }
  const runtime::TransferCounters before = communicator->counters();
  AblationRankResult mine;
  mine.set_rank(rank);
  mine.mutable_step_ms()->Reserve(steps);
  for (int i = 0; i < steps; ++i, ++step) {
    ASSIGN_OR_RETURN(absl::Duration d, replayer->RunStep(*communicator, step));
    mine.add_step_ms(absl::ToDoubleMilliseconds(d));
  }
  const runtime::TransferCounters after = communicator->counters();
  mine.set_bytes_sent(static_cast<double>(after.bytes_sent - before.bytes_sent));
  mine.set_copies(static_cast<double>(after.copies - before.copies));
  RETURN_IF_ERROR(
      store.Set(absl::StrCat("result/", rank), mine.SerializeAsString()));
  RETURN_IF_ERROR(communicator->Shutdown());
  if (rank != 0) return absl::OkStatus();
  std::vector<double> step_ms(steps, 0);
  std::vector<std::vector<double>> rank_step_ms;
  double bytes = 0, copies = 0, slowest_total_ms = 0;
  for (int r = 0; r < world_size; ++r) {
    const std::string key = absl::StrCat("result/", r);
    ASSIGN_OR_RETURN(std::string value, store.Get(key, options.timeout));
    // Written by whoever can reach the store: checked before it is used.
    AblationRankResult& peer = *result->add_ranks();
    if (!peer.ParseFromString(value) || peer.rank() != r ||
        peer.step_ms_size() != steps) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the result of rank ", r, " in the store (", key, ", ", value.size(),
          " bytes) is not ", steps, " steps of rank ", r,
          ": do all ranks run this binary with the same --steps?"));
    }
    rank_step_ms.emplace_back(peer.step_ms().begin(), peer.step_ms().end());
    double total_ms = 0;
    for (int i = 0; i < steps; ++i) {
      step_ms[i] = std::max(step_ms[i], peer.step_ms(i));
      total_ms += peer.step_ms(i);
    }
    slowest_total_ms = std::max(slowest_total_ms, total_ms);
    bytes += peer.bytes_sent();
    copies += peer.copies();
  }
  result->set_communicator(parts[1]);
  result->set_step_p50_ms(Percentile(step_ms, 50));
  result->set_step_p99_ms(Percentile(step_ms, 99));
  result->set_step_mean_ms(slowest_total_ms / steps);
  result->set_step_block_median_ms(MedianOfBlockMeans(
      rank_step_ms, std::clamp(steps / kMinBlockSteps, 1, kStatisticBlocks)));
  result->set_bytes_per_step(bytes / steps);
  // Streaming bandwidth: every step's bytes over the slowest rank's time.
  result->set_gbps(bytes / (slowest_total_ms * 1e6));
  result->set_copies_per_step(copies / steps);
  return absl::OkStatus();
}

// The cache-line round trip now (bench/line_probe.h), or 0 where it cannot be
// taken (one CPU).
double LineRoundTripNs() {
  absl::StatusOr<LineRoundTrip> probe = ProbeLineRoundTrip({});
  return probe.ok() ? probe->round_trip_ns : 0;
}

// "50/53": the probes before and after a run.
std::string LineColumn(const AblationRun& r) {
  if (r.line_round_trip_ns_before() <= 0 || r.line_round_trip_ns_after() <= 0) return "-";
  return absl::StrFormat("%.0f/%.0f", r.line_round_trip_ns_before(),
                         r.line_round_trip_ns_after());
}

// Runs `graph` under every communicator as local jobs.
absl::StatusOr<Runs> RunGraph(const std::string& graph_name, char** argv) {
  ASSIGN_OR_RETURN(graph::GraphDef graph, FindGraph(graph_name));
  Runs runs;
  ASSIGN_OR_RETURN(plan::TransferPlan plan, graph::PlanGraph(graph, PlannerFlags()));
  const std::vector<std::string> communicators =
      absl::StrSplit(absl::GetFlag(FLAGS_communicators), ',');
  for (const std::string& name : communicators) {
    const std::string job = absl::StrCat(graph_name, "|", name);
    std::fprintf(stderr, "  %-22s %-10s ", graph_name.c_str(), name.c_str());
    AblationRun result;
    absl::Status status;
    const double line_before = LineRoundTripNs();
    const int code = launch::RunLocalJob(
        plan.world_size(), argv, {absl::StrCat("--job=", job)},
        [&](rdma::Store& store) {
          status = RunJobRank(0, plan.world_size(), store, job, &result);
          return status.ok() ? 0 : 1;
        });
    if (code != 0) {
      return absl::InternalError(absl::StrCat(
          job, " failed: ", status.ok() ? "a rank failed" : status.ToString()));
    }
    result.set_line_round_trip_ns_before(line_before);
    result.set_line_round_trip_ns_after(LineRoundTripNs());
    std::fprintf(stderr, "step %.3f ms (median of block means)\n",
                 result.step_block_median_ms());
    *runs.Add() = std::move(result);
  }
  for (AblationRun& run : runs) {
    run.set_time_ratio_to_rdma(run.step_block_median_ms() /
                               runs.Get(0).step_block_median_ms());
  }
  return runs;
}

void PrintGraphs(const google::protobuf::RepeatedPtrField<results::AblationGraph>& graphs) {
  TextTable table({"graph", "communicator", "MB/step", "step p50 ms", "p99 ms",
                   "mean ms", "MoM ms", "GB/s", "copies/step",
                   "time / rdma", "line ns"});
  for (const results::AblationGraph& g : graphs) {
    for (const AblationRun& r : g.runs()) {
      table.AddRow({g.graph(), r.communicator(),
                    absl::StrFormat("%.1f", r.bytes_per_step() / 1e6),
                    absl::StrFormat("%.3f", r.step_p50_ms()),
                    absl::StrFormat("%.3f", r.step_p99_ms()),
                    absl::StrFormat("%.3f", r.step_mean_ms()),
                    absl::StrFormat("%.3f", r.step_block_median_ms()),
                    absl::StrFormat("%.2f", r.gbps()),
                    absl::StrFormat("%.1f", r.copies_per_step()),
                    absl::StrFormat("%.2fx", r.time_ratio_to_rdma()), LineColumn(r)});
    }
  }
  std::printf("%s\n", table.Render().c_str());
}

void PrintSweep(
    const google::protobuf::RepeatedPtrField<AblationSweepPoint>& sweep) {
  TextTable table({"bytes", "communicator", "step p50 ms", "p99 ms",
                   "mean ms", "MoM ms", "GB/s",
                   "memcpy GB/s", "x memcpy", "copies/step", "time / rdma", "line ns"});
  for (const AblationSweepPoint& p : sweep) {
    for (const AblationRun& r : p.runs()) {
      table.AddRow({FormatBytes(static_cast<uint64_t>(p.bytes())),
                    r.communicator(),
                    absl::StrFormat("%.3f", r.step_p50_ms()),
                    absl::StrFormat("%.3f", r.step_p99_ms()),
                    absl::StrFormat("%.4f", r.step_mean_ms()),
                    absl::StrFormat("%.4f", r.step_block_median_ms()),
                    absl::StrFormat("%.2f", r.gbps()),
                    absl::StrFormat("%.2f", p.memcpy_gbps()),
                    absl::StrFormat("%.2f", r.gbps() / p.memcpy_gbps()),
                    absl::StrFormat("%.1f", r.copies_per_step()),
                    absl::StrFormat("%.2fx", r.time_ratio_to_rdma()), LineColumn(r)});
    }
  }
  std::printf("%s\n", table.Render().c_str());
}

// The report as JSON (--json) and as the TSV files tools/plot_ablation.sh
// reads (--tsv); kUnavailable naming the file that cannot be written.
absl::Status WriteOutputs(const results::BenchmarkReport& report) {
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    RETURN_IF_ERROR(results::WriteJsonFile(report, path));
  }
  const std::string path = absl::GetFlag(FLAGS_tsv);
  if (path.empty()) return absl::OkStatus();
  const results::AblationResults& ablation = report.ablation();
  std::ofstream g(path + ".graphs");
  g << "graph";
  if (!ablation.graphs().empty()) {
    for (const AblationRun& r : ablation.graphs(0).runs()) {
      g << "\t" << r.communicator();
    }
  }
  g << "\n";
  for (const results::AblationGraph& graph : ablation.graphs()) {
    g << graph.graph();
    for (const AblationRun& r : graph.runs()) {
      g << "\t" << r.step_block_median_ms();
    }
    g << "\n";
  }
  std::ofstream s(path + ".sweep");
  s << "bytes\tmemcpy";
  if (!ablation.sweep().empty()) {
    for (const AblationRun& r : ablation.sweep(0).runs()) {
      s << "\t" << r.communicator();
    }
  }
  s << "\n";
  for (const AblationSweepPoint& point : ablation.sweep()) {
    s << static_cast<int64_t>(point.bytes()) << "\t" << point.memcpy_gbps();
    for (const AblationRun& r : point.runs()) s << "\t" << r.gbps();
    s << "\n";
  }
  g.close();
  s.close();
  if (!g || !s) {
    return absl::UnavailableError(absl::StrCat(
        "cannot write ", path, ".graphs and ", path,
        ".sweep: does the directory exist and is it writable?"));
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  rdmaflow::ParseProgramFlags(argc, argv,
      "RPC-vs-RDMA ablation: replays training graphs' communication between "
      "processes through the rdma (zero copy), rdma_copy and grpc "
      "communicators.\n  ablation [--graphs=all] [--communicators=rdma,"
      "rdma_copy,grpc] [--steps=20] [--sweep] [--json=out.json]");
  const absl::Time start = absl::Now();
  if (absl::GetFlag(FLAGS_steps) < 1 || absl::GetFlag(FLAGS_sweep_steps) < 1 ||
      absl::GetFlag(FLAGS_warmup) < 0 || absl::GetFlag(FLAGS_sweep_min) < 4 ||
      absl::GetFlag(FLAGS_sweep_min) % 4 != 0 || !(absl::GetFlag(FLAGS_min_time_s) >= 0) ||
      absl::GetFlag(FLAGS_min_time_s) > 3600) {
    std::fprintf(stderr,
                 "--steps and --sweep_steps must be >= 1, --warmup >= 0, "
                 "--sweep_min a positive multiple of 4 (float32 tensors), "
                 "--min_time_s 0 to 3600\n");
    return 2;
  }
  if (absl::StatusOr<onesided::WaitPolicy> wait =
          onesided::WaitPolicy::Parse(absl::GetFlag(FLAGS_wait));
      !wait.ok()) {
    std::fprintf(stderr, "--wait: %s\n", wait.status().ToString().c_str());
    return 2;
  }
  if (absl::Status status = graph::CheckPlannerOptions(PlannerFlags());
      !status.ok()) {
    std::fprintf(stderr, "--pipeline_depth: %s\n", status.ToString().c_str());
    return 2;
  }
  if (const std::string job = absl::GetFlag(FLAGS_job); !job.empty()) {
    return launch::RunLaunchedRank([&](int rank, int world_size, rdma::Store& store) {
      absl::Status status = RunJobRank(rank, world_size, store, job, nullptr);
      if (!status.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", rank, status.ToString().c_str());
        return 1;
      }
      return 0;
    });
  }
  std::vector<std::string> names;
  const std::string graphs_flag = absl::GetFlag(FLAGS_graphs);
  if (graphs_flag == "all") {
    for (const AblationGraph& g : AblationGraphs()) names.push_back(g.name);
  } else if (graphs_flag != "none") {
    names = absl::StrSplit(graphs_flag, ',');
  }
  const std::vector<std::string> known_communicators = runtime::CommunicatorNames();
  for (absl::string_view text : absl::StrSplit(absl::GetFlag(FLAGS_communicators), ',')) {
    absl::StatusOr<CommunicatorEntry> entry = ParseCommunicatorEntry(text);
    if (!entry.ok()) {
      std::fprintf(stderr, "ablation: --communicators: %s (see ablation --help)\n",
                   std::string(entry.status().message()).c_str());
      return kExitUsage;
    }
    // Every entry's transport parameters are checked before the first run,
    // so that a typo does not end a run of many minutes half-way.
    if (absl::StatusOr<std::unique_ptr<rdma::Transport>> transport =
            rdma::CreateBuiltinTransport(absl::GetFlag(FLAGS_transport), entry->params, 0);
        !transport.ok()) {
      std::fprintf(stderr, "ablation: --communicators entry '%s': %s\n",
                   std::string(text).c_str(), transport.status().ToString().c_str());
      return kExitUsage;
    }
    const std::string& name = entry->name;
    if (std::find(known_communicators.begin(), known_communicators.end(), name) ==
        known_communicators.end()) {
      std::fprintf(stderr,
                   "ablation: --communicators: unknown communicator '%s' (known: %s) "
                   "(see ablation --help)\n",
                   name.c_str(), absl::StrJoin(known_communicators, ", ").c_str());
      return kExitUsage;
    }
  }
  for (const std::string& name : names) {
    if (absl::Status known = FindGraph(name).status(); !known.ok()) {
      std::fprintf(stderr, "ablation: --graphs: %s (see ablation --help)\n",
                   std::string(known.message()).c_str());
      return kExitUsage;
    }
  }
  const std::string description =
      absl::StrCat(absl::GetFlag(FLAGS_transport), " ", absl::GetFlag(FLAGS_params), "; wait ",
                   absl::GetFlag(FLAGS_wait));
  std::printf("# ablation over %s: at least %d steps (sweep: %d) and %g s a run, after %d "
              "checked warm-up steps; p50/p99: the slowest rank's, step by step; mean: the "
              "slowest rank's total / steps; MoM: the median of up to %d blocks' means "
              "(blocks of %d steps or more); time / rdma: of the MoMs; line ns: the cache-line "
              "round trip between two CPUs before/after the run (the machine's placement of "
              "them: bench/line_probe.h)\n",
              description.c_str(), absl::GetFlag(FLAGS_steps), absl::GetFlag(FLAGS_sweep_steps),
              absl::GetFlag(FLAGS_min_time_s), absl::GetFlag(FLAGS_warmup), kStatisticBlocks,
              kMinBlockSteps);
  results::BenchmarkReport report;
  *report.mutable_run() = results::NewRunInfo("ablation", start);
  report.mutable_run()->set_transport(absl::GetFlag(FLAGS_transport));
  report.mutable_run()->set_params(absl::GetFlag(FLAGS_params));
  report.mutable_run()->set_description(absl::StrCat("wait ", absl::GetFlag(FLAGS_wait)));
  results::AblationResults& ablation = *report.mutable_ablation();
  ablation.set_steps(absl::GetFlag(FLAGS_steps));
  ablation.set_sweep_steps(absl::GetFlag(FLAGS_sweep_steps));
  ablation.set_warmup(absl::GetFlag(FLAGS_warmup));
  ablation.set_compute_delay_us(
      static_cast<double>(absl::GetFlag(FLAGS_compute_delay_us)));
  for (const std::string& name : names) {
    absl::StatusOr<Runs> runs = RunGraph(name, argv);
    if (!runs.ok()) {
      std::fprintf(stderr, "%s\n", runs.status().ToString().c_str());
      return 1;
    }
    results::AblationGraph& graph = *ablation.add_graphs();
    graph.set_graph(name);
    *graph.mutable_runs() = std::move(*runs);
  }
  if (!ablation.graphs().empty()) PrintGraphs(ablation.graphs());
  if (absl::GetFlag(FLAGS_sweep)) {
    for (int64_t bytes = absl::GetFlag(FLAGS_sweep_min);
         bytes <= absl::GetFlag(FLAGS_sweep_max); bytes *= 4) {
      absl::StatusOr<Runs> runs = RunGraph(absl::StrCat(bytes), argv);
      if (!runs.ok()) {
        std::fprintf(stderr, "%s\n", runs.status().ToString().c_str());
        return 1;
      }
      AblationSweepPoint& point = *ablation.add_sweep();
      point.set_bytes(static_cast<double>(bytes));
      const int iterations =
          static_cast<int>(std::clamp<int64_t>((int64_t{1} << 30) / bytes, 4, 5000));
      point.set_memcpy_gbps(MeasureMemcpy(bytes, iterations) / 1000);
      *point.mutable_runs() = std::move(*runs);
    }
    PrintSweep(ablation.sweep());
  }
  if (const absl::Status written = WriteOutputs(report); !written.ok()) {
    std::fprintf(stderr, "%s\n", written.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace rdmaflow::bench

int main(int argc, char** argv) { return rdmaflow::bench::Main(argc, argv); }
