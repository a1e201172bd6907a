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
// starts the other ranks (bench/local_job.h).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/ablation_graphs.h"
#include "bench/local_job.h"
#include "bench/pingpong.h"
#include "common/status_macros.h"
#include "common/text_table.h"
#include "graph_analyzer/planner.h"
#include "runtime/communicator_factory.h"
#include "runtime/executor.h"
#include "runtime/replay.h"

ABSL_FLAG(std::string, graphs, "all",
          "Comma-separated graphs to replay (mlp, cnn_ps, cnn_layer_separated, "
          "seq, vgg_fc, small_tensors), 'all', or 'none'.");
ABSL_FLAG(std::string, communicators, "rdma,rdma_copy,grpc",
          "Comma-separated communicators to compare.");
ABSL_FLAG(int32_t, steps, 20, "Measured steps per run.");
ABSL_FLAG(int32_t, warmup, 4,
          "Steps before measuring (checked byte for byte; includes dynamic "
          "tracing).");
ABSL_FLAG(bool, sweep, true, "Also sweep one tensor over sizes.");
ABSL_FLAG(int32_t, sweep_steps, 100, "Measured steps per sweep size.");
ABSL_FLAG(int64_t, sweep_min, 4096, "Smallest sweep size in bytes.");
ABSL_FLAG(int64_t, sweep_max, int64_t{64} << 20, "Largest sweep size in bytes.");
ABSL_FLAG(int64_t, compute_delay_us, 0,
          "Busy time per step standing in for compute, in microseconds.");
ABSL_FLAG(std::string, transport, "ucx", "rdmaflow transport (ucx, ibverbs).");
ABSL_FLAG(std::string, params, "tls=shm", "Transport parameters, key=value,...");
ABSL_FLAG(std::string, json, "", "Write the results as JSON here.");
ABSL_FLAG(std::string, tsv, "",
          "Write TSV for tools/plot_ablation.sh here (<path>.graphs, "
          "<path>.sweep).");
ABSL_FLAG(std::string, trace_dir, "",
          "Write a Chrome trace (chrome://tracing, Perfetto) of every transfer "
          "of each rank of the zero-copy runs here: "
          "<graph>.rdma.rank<r>.json.");
ABSL_FLAG(std::string, job, "", "Internal: the job a launched rank runs.");

namespace rdmaflow::bench {
namespace {

// One (graph, communicator) run as rank 0 saw it.
struct RunResult {
  std::string communicator;
  double p50_ms = 0;
  double p99_ms = 0;
  double bytes_per_step = 0;
  double gbps = 0;  // bytes moved / the slowest rank's total step time
  double copies_per_step = 0;
  double ratio = 0;  // step time / zero-copy step time
};

struct GraphResult {
  std::string graph;
  int64_t bytes = 0;  // sweep size; 0 for graphs
  double memcpy_gbps = 0;
  std::vector<RunResult> runs;
};

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

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t index = std::min(values.size() - 1,
                                static_cast<size_t>(p * values.size()));
  return values[index];
}

// Runs one rank of job "<graph>|<communicator>"; every rank publishes its
// step times (ns) and counter deltas; rank 0 gathers them into `result`.
absl::Status RunJobRank(int rank, int world_size, rdma::Store& store,
                        const std::string& job, RunResult* result) {
  std::vector<std::string> parts = absl::StrSplit(job, '|');
  if (parts.size() != 2) return absl::InvalidArgumentError("bad --job");
  ASSIGN_OR_RETURN(graph::GraphDef graph, FindGraph(parts[0]));
  ASSIGN_OR_RETURN(plan::TransferPlan plan, graph::PlanGraph(graph, {}));
  if (plan.world_size() != world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "graph ", parts[0], " needs ", plan.world_size(), " ranks"));
  }
  ASSIGN_OR_RETURN(auto transport,
                   MakeTransport(absl::GetFlag(FLAGS_transport),
                                 absl::GetFlag(FLAGS_params), rank));
  runtime::CommunicatorOptions options;
  options.ns = "ablation";
  options.timeout = absl::Seconds(120);
  if (const std::string dir = absl::GetFlag(FLAGS_trace_dir); !dir.empty()) {
    options.trace_path =
        absl::StrCat(dir, "/", parts[0], ".", parts[1], ".rank", rank, ".json");
  }
  ASSIGN_OR_RETURN(auto communicator,
                   runtime::CreateCommunicator(parts[1], plan, *transport,
                                               store, options));
  runtime::ReplayOptions replay;
  replay.vary_content = false;
  replay.compute_delay = absl::Microseconds(absl::GetFlag(FLAGS_compute_delay_us));
  // The zero-copy sender builds its tensors in registered memory, as
  // runtime/torch's allocator makes LibTorch do.
  std::unique_ptr<rdma::MemoryRegion> arena;
  if (auto* executor = dynamic_cast<runtime::Executor*>(communicator.get())) {
    ASSIGN_OR_RETURN(auto probe, runtime::Replayer::Create(plan, rank, {}));
    uint64_t send_bytes = 0;
    for (const runtime::TransferInfo& info : probe->rank_plan().sends()) {
      send_bytes += info.data_bytes + 64;
    }
    ASSIGN_OR_RETURN(rdma::MemoryRegion region,
                     transport->Allocate(2 * send_bytes + (size_t{4} << 20)));
    arena = std::make_unique<rdma::MemoryRegion>(std::move(region));
    executor->AddSendArena(arena.get());
    replay.arena = arena.get();
  }
  ASSIGN_OR_RETURN(auto replayer, runtime::Replayer::Create(plan, rank, replay));
  const int warmup = absl::GetFlag(FLAGS_warmup);
  int64_t sweep_bytes = 0;
  const int steps = absl::SimpleAtoi(parts[0], &sweep_bytes)
                        ? absl::GetFlag(FLAGS_sweep_steps)
                        : absl::GetFlag(FLAGS_steps);
  runtime::TransferCounters before;
  std::vector<int64_t> times;
  for (int step = 0; step < warmup + steps; ++step) {
    if (step == warmup) before = communicator->counters();
    ASSIGN_OR_RETURN(absl::Duration d, replayer->RunStep(*communicator, step));
    if (step >= warmup) times.push_back(absl::ToInt64Nanoseconds(d));
  }
  const runtime::TransferCounters after = communicator->counters();
  RETURN_IF_ERROR(store.Set(
      absl::StrCat("result/", rank),
      absl::StrCat(absl::StrJoin(times, ","), ";",
                   after.bytes_sent - before.bytes_sent, ";",
                   after.copies - before.copies)));
  RETURN_IF_ERROR(communicator->Shutdown());
  if (rank != 0) return absl::OkStatus();
  std::vector<double> step_ms(steps, 0);
  double bytes = 0, copies = 0, slowest_total_ms = 0;
  for (int r = 0; r < world_size; ++r) {
    ASSIGN_OR_RETURN(std::string value,
                     store.Get(absl::StrCat("result/", r), options.timeout));
    std::vector<std::string> fields = absl::StrSplit(value, ';');
    std::vector<std::string> ts = absl::StrSplit(fields[0], ',');
    double total_ms = 0;
    for (int i = 0; i < steps && i < static_cast<int>(ts.size()); ++i) {
      double ns = 0;
      (void)absl::SimpleAtod(ts[i], &ns);
      step_ms[i] = std::max(step_ms[i], ns / 1e6);
      total_ms += ns / 1e6;
    }
    slowest_total_ms = std::max(slowest_total_ms, total_ms);
    double b = 0, c = 0;
    (void)absl::SimpleAtod(fields[1], &b);
    (void)absl::SimpleAtod(fields[2], &c);
    bytes += b;
    copies += c;
  }
  result->communicator = parts[1];
  result->p50_ms = Percentile(step_ms, 0.5);
  result->p99_ms = Percentile(step_ms, 0.99);
  result->bytes_per_step = bytes / steps;
  // Streaming bandwidth: every step's bytes over the slowest rank's time.
  result->gbps = result->bytes_per_step * steps / (slowest_total_ms * 1e6);
  result->copies_per_step = copies / steps;
  return absl::OkStatus();
}

// Runs `graph` under every communicator as local jobs.
absl::StatusOr<GraphResult> RunGraph(const std::string& graph_name,
                                     char** argv) {
  ASSIGN_OR_RETURN(graph::GraphDef graph, FindGraph(graph_name));
  GraphResult out;
  out.graph = graph_name;
  ASSIGN_OR_RETURN(plan::TransferPlan plan, graph::PlanGraph(graph, {}));
  const std::vector<std::string> communicators =
      absl::StrSplit(absl::GetFlag(FLAGS_communicators), ',');
  for (const std::string& name : communicators) {
    const std::string job = absl::StrCat(graph_name, "|", name);
    std::fprintf(stderr, "  %-22s %-10s ", graph_name.c_str(), name.c_str());
    RunResult result;
    absl::Status status;
    const int code = RunLocalJob(
        plan.world_size(), argv, {absl::StrCat("--job=", job)},
        [&](rdma::Store& store) {
          status = RunJobRank(0, plan.world_size(), store, job, &result);
          return status.ok() ? 0 : 1;
        });
    if (code != 0) {
      return absl::InternalError(absl::StrCat(
          job, " failed: ", status.ok() ? "a rank failed" : status.ToString()));
    }
    std::fprintf(stderr, "step %.3f ms\n", result.p50_ms);
    out.runs.push_back(result);
  }
  for (RunResult& run : out.runs) {
    run.ratio = run.p50_ms / out.runs.front().p50_ms;
  }
  return out;
}

void PrintGraphs(const std::vector<GraphResult>& results, bool sweep) {
  TextTable table(
      sweep ? std::vector<std::string>{"bytes", "communicator", "step p50 ms",
                                       "p99 ms", "GB/s", "memcpy GB/s",
                                       "x memcpy", "copies/step", "time / rdma"}
            : std::vector<std::string>{"graph", "communicator", "MB/step",
                                       "step p50 ms", "p99 ms", "GB/s",
                                       "copies/step", "time / rdma"});
  for (const GraphResult& g : results) {
    for (const RunResult& r : g.runs) {
      if (sweep) {
        table.AddRow({FormatBytes(g.bytes), r.communicator,
                      absl::StrFormat("%.3f", r.p50_ms),
                      absl::StrFormat("%.3f", r.p99_ms),
                      absl::StrFormat("%.2f", r.gbps),
                      absl::StrFormat("%.2f", g.memcpy_gbps),
                      absl::StrFormat("%.2f", r.gbps / g.memcpy_gbps),
                      absl::StrFormat("%.1f", r.copies_per_step),
                      absl::StrFormat("%.2fx", r.ratio)});
      } else {
        table.AddRow({g.graph, r.communicator,
                      absl::StrFormat("%.1f", r.bytes_per_step / 1e6),
                      absl::StrFormat("%.3f", r.p50_ms),
                      absl::StrFormat("%.3f", r.p99_ms),
                      absl::StrFormat("%.2f", r.gbps),
                      absl::StrFormat("%.1f", r.copies_per_step),
                      absl::StrFormat("%.2fx", r.ratio)});
      }
    }
  }
  std::printf("%s\n", table.Render().c_str());
}

std::string RunsJson(const GraphResult& g) {
  std::vector<std::string> runs;
  for (const RunResult& r : g.runs) {
    runs.push_back(absl::StrFormat(
        "{\"communicator\": \"%s\", \"step_p50_ms\": %.4f, \"step_p99_ms\": "
        "%.4f, \"bytes_per_step\": %.0f, \"gbps\": %.4f, \"copies_per_step\": "
        "%.2f, \"time_ratio_to_rdma\": %.3f}",
        r.communicator, r.p50_ms, r.p99_ms, r.bytes_per_step, r.gbps,
        r.copies_per_step, r.ratio));
  }
  return absl::StrCat("[", absl::StrJoin(runs, ", "), "]");
}

bool WriteOutputs(const std::string& description,
                  const std::vector<GraphResult>& graphs,
                  const std::vector<GraphResult>& sweep) {
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    std::ofstream out(path);
    out << "{\"transport\": \"" << description << "\", \"steps\": "
        << absl::GetFlag(FLAGS_steps) << ", \"graphs\": [";
    for (size_t i = 0; i < graphs.size(); ++i) {
      out << (i ? ",\n  " : "\n  ") << "{\"graph\": \"" << graphs[i].graph
          << "\", \"runs\": " << RunsJson(graphs[i]) << "}";
    }
    out << "],\n \"sweep\": [";
    for (size_t i = 0; i < sweep.size(); ++i) {
      out << (i ? ",\n  " : "\n  ") << "{\"bytes\": " << sweep[i].bytes
          << ", \"memcpy_gbps\": " << sweep[i].memcpy_gbps
          << ", \"runs\": " << RunsJson(sweep[i]) << "}";
    }
    out << "]}\n";
    if (!out) return false;
  }
  if (const std::string path = absl::GetFlag(FLAGS_tsv); !path.empty()) {
    std::ofstream g(path + ".graphs");
    g << "graph";
    if (!graphs.empty()) {
      for (const RunResult& r : graphs[0].runs) g << "\t" << r.communicator;
    }
    g << "\n";
    for (const GraphResult& result : graphs) {
      g << result.graph;
      for (const RunResult& r : result.runs) g << "\t" << r.p50_ms;
      g << "\n";
    }
    std::ofstream s(path + ".sweep");
    s << "bytes\tmemcpy";
    if (!sweep.empty()) {
      for (const RunResult& r : sweep[0].runs) s << "\t" << r.communicator;
    }
    s << "\n";
    for (const GraphResult& result : sweep) {
      s << result.bytes << "\t" << result.memcpy_gbps;
      for (const RunResult& r : result.runs) s << "\t" << r.gbps;
      s << "\n";
    }
    if (!g || !s) return false;
  }
  return true;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "RPC-vs-RDMA ablation: replays training graphs' communication between "
      "processes through the rdma (zero copy), rdma_copy and grpc "
      "communicators.\n  ablation [--graphs=all] [--communicators=rdma,"
      "rdma_copy,grpc] [--steps=20] [--sweep] [--json=out.json]");
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_steps) < 1 || absl::GetFlag(FLAGS_sweep_steps) < 1 ||
      absl::GetFlag(FLAGS_warmup) < 0 || absl::GetFlag(FLAGS_sweep_min) < 4 ||
      absl::GetFlag(FLAGS_sweep_min) % 4 != 0) {
    std::fprintf(stderr,
                 "--steps and --sweep_steps must be >= 1, --warmup >= 0, "
                 "--sweep_min a positive multiple of 4 (float32 tensors)\n");
    return 2;
  }
  if (const std::string job = absl::GetFlag(FLAGS_job); !job.empty()) {
    return RunLaunchedRank([&](int rank, int world_size, rdma::Store& store) {
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
  const std::string description = absl::StrCat(
      absl::GetFlag(FLAGS_transport), " ", absl::GetFlag(FLAGS_params));
  std::printf("# ablation over %s: %d steps after %d warm-up steps, "
              "step time = slowest rank\n",
              description.c_str(), absl::GetFlag(FLAGS_steps),
              absl::GetFlag(FLAGS_warmup));
  std::vector<GraphResult> graphs;
  for (const std::string& name : names) {
    absl::StatusOr<GraphResult> result = RunGraph(name, argv);
    if (!result.ok()) {
      std::fprintf(stderr, "%s\n", result.status().ToString().c_str());
      return 1;
    }
    graphs.push_back(*result);
  }
  if (!graphs.empty()) PrintGraphs(graphs, false);
  std::vector<GraphResult> sweep;
  if (absl::GetFlag(FLAGS_sweep)) {
    for (int64_t bytes = absl::GetFlag(FLAGS_sweep_min);
         bytes <= absl::GetFlag(FLAGS_sweep_max); bytes *= 4) {
      absl::StatusOr<GraphResult> result = RunGraph(absl::StrCat(bytes), argv);
      if (!result.ok()) {
        std::fprintf(stderr, "%s\n", result.status().ToString().c_str());
        return 1;
      }
      result->bytes = bytes;
      const int iterations =
          static_cast<int>(std::clamp<int64_t>((int64_t{1} << 30) / bytes, 4, 5000));
      result->memcpy_gbps = MeasureMemcpy(bytes, iterations) / 1000;
      sweep.push_back(*result);
    }
    PrintGraphs(sweep, true);
  }
  if (!WriteOutputs(description, graphs, sweep)) {
    std::fprintf(stderr, "cannot write the results\n");
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace rdmaflow::bench

int main(int argc, char** argv) { return rdmaflow::bench::Main(argc, argv); }
