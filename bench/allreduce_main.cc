// allreduce_bench: all-reduce latency and bandwidth of rdmaflow
// (collectives/allreduce_group.h: the same-host algorithms where the
// transport maps peers' memory, hierarchical across hosts, else the ring;
// "rdmaflow-ring" forces the ring, "rdmaflow-flat" one flat ring across
// hosts) next to Gloo's ring all-reduce (bench/gloo_group.h), in the same processes and the same
// run, for each rank count and size. Each row names the algorithm that ran
// and one thread's `dst += src` bandwidth at that size (the reduction's
// bound); memcpy and a float32 sum at 16 MiB head the table. MPI is
// measured by mpi_allreduce with the same sizes (tools/bench_allreduce.sh
// runs both and merges the tables).
//
//   allreduce_bench --ranks=2,4 --json=allreduce.json
//
// --device=cuda (or fake) adds "rdmaflow-device": AllReduceGroup on device
// memory (bench/device_allreduce.h), every rank on one device, with the
// device's copy bandwidth in the header and each row's bound; with
// "rdmaflow-device-ring" in --impls, also the group's ring on pinned host
// copies of device memory (what a device group runs across hosts).
//
// Without RANK in the environment it starts each job's ranks as processes
// itself (rank 0 is this process); under torchrun (or one process per rank
// started on each host, as tools/bench_hierarchical.sh does) each process
// is a rank and rank 0 prints the table.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ATen/Parallel.h"
#include "ATen/ops/zeros.h"
#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/allreduce_sweep.h"
#include "bench/compute_load.h"
#include "bench/device_allreduce.h"
#include "bench/gloo_group.h"
#include "collectives/allreduce_group.h"
#include "common/program_flags.h"
#include "common/status_macros.h"
#include "device/runtime_factory.h"
#include "launch/launcher.h"
#include "launch/rank.h"
#include "onesided/progress/wait_policy.h"
#include "rdma/builtin_transports.h"
#include "rdma/rendezvous.h"
#include "results/run_info.h"

ABSL_FLAG(std::string, ranks, "2,4", "Rank counts to measure (each 2..256), comma-separated.");
ABSL_FLAG(std::string, impls, "rdmaflow,gloo",
          "Implementations: rdmaflow (the group's pick per size), rdmaflow-ring (the ring "
          "only, for the ablation), rdmaflow-flat (no hierarchy across hosts: one ring), "
          "gloo (on one host only: it runs over 127.0.0.1); with --device, "
          "rdmaflow-device-ring (the device group's ring on host copies).");
ABSL_FLAG(std::string, transport, "ucx", "rdmaflow transport: ucx or ibverbs.");
ABSL_FLAG(std::string, params, "", "Transport parameters key=value,...");
ABSL_FLAG(int64_t, chunk_bytes, 256 << 10, "rdmaflow ring: bytes per pipelined piece.");
ABSL_FLAG(int64_t, one_shot_max_bytes, 64 << 10,
          "rdmaflow same-host: calls up to this size take the one-shot path.");
ABSL_FLAG(int64_t, host_chunk_bytes, 64 << 10,
          "rdmaflow same-host: the reduce-scatter's unit of progress.");
ABSL_FLAG(int32_t, slots, 32, "rdmaflow: staging slots per ring link (at most).");
ABSL_FLAG(int64_t, min_bytes, 4 << 10, "Smallest all-reduce (bytes of float32).");
ABSL_FLAG(int64_t, max_bytes, int64_t{64} << 20, "Largest all-reduce.");
ABSL_FLAG(int64_t, factor, 4, "Size step.");
ABSL_FLAG(int64_t, byte_budget, int64_t{256} << 20,
          "Bytes per size and implementation (iterations = budget / size).");
ABSL_FLAG(int32_t, max_iters, 500, "Upper bound on iterations per size.");
ABSL_FLAG(int32_t, timeout_s, 120, "Give up when a rank is silent this long.");
ABSL_FLAG(std::string, json, "", "Write the results as JSON to this file.");
ABSL_FLAG(int32_t, load, 0,
          "Threads of busy compute running beside the ranks for the whole run (0..64): "
          "how the collectives hold up when ranks share their cores with work.");
ABSL_FLAG(std::string, device, "",
          "Also measure the all-reduce on device memory (impl rdmaflow-device): cuda, or "
          "fake (host shared memory standing in for a device). Empty: host memory only.");
ABSL_FLAG(int64_t, device_chunk_bytes, int64_t{64} << 20,
          "rdmaflow-device: bytes a rank reduces between two published words.");
ABSL_FLAG(int64_t, device_one_shot_max_bytes, 256 << 10,
          "rdmaflow-device: largest call taking the one-shot path.");
ABSL_FLAG(std::string, wait, "adaptive",
          "rdmaflow: how a waiting rank idles: adaptive, spin, yield, or "
          "adaptive:spin=N,yield_us=N,sleep_us=N (onesided/progress/wait_policy.h).");

namespace rdmaflow::bench {
namespace {

SweepOptions SweepFromFlags() {
  SweepOptions s;
  s.min_bytes = absl::GetFlag(FLAGS_min_bytes);
  s.max_bytes = absl::GetFlag(FLAGS_max_bytes);
  s.factor = absl::GetFlag(FLAGS_factor);
  s.byte_budget = absl::GetFlag(FLAGS_byte_budget);
  s.max_iters = absl::GetFlag(FLAGS_max_iters);
  return s;
}

constexpr absl::string_view kImpls[] = {"rdmaflow", "rdmaflow-ring",
                                        "rdmaflow-flat", "gloo",
                                        "rdmaflow-device-ring"};

// kInvalidArgument naming an --impls entry that is none of kImpls.
absl::Status CheckImpls() {
  for (absl::string_view i : absl::StrSplit(absl::GetFlag(FLAGS_impls), ',')) {
    if (std::find(std::begin(kImpls), std::end(kImpls), i) == std::end(kImpls)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--impls: unknown implementation '", i, "' (known: ",
          absl::StrJoin(kImpls, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

bool Wants(const std::string& impl) {
  for (absl::string_view i : absl::StrSplit(absl::GetFlag(FLAGS_impls), ',')) {
    if (i == impl) return true;
  }
  return false;
}

// Checks the sum once, then times the calls (on zeros, so nothing grows);
// with `load` (rank 0's compute load), what it got while they ran.
absl::StatusOr<AllReduceRow> MeasureGroup(const std::string& impl,
                                          collectives::AllReduceGroup& ring,
                                          rdma::Store& store, int world, int64_t bytes,
                                          int iterations, const ComputeLoad* load) {
  const size_t count = bytes / sizeof(float);
  float* data = reinterpret_cast<float*>(ring.data());
  for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>(ring.rank() + 1);
  RETURN_IF_ERROR(ring.AllReduce(0, count, collectives::DataType::kFloat32));
  const float expected = world * (world + 1) / 2.0f;
  for (size_t i = 0; i < count; ++i) {
    if (data[i] != expected) {
      return absl::InternalError(absl::StrCat("rdmaflow all-reduce of ", bytes,
                                              " bytes: element ", i, " is ", data[i],
                                              ", expected ", expected));
    }
  }
  std::fill(data, data + count, 0.0f);
  RETURN_IF_ERROR(rdma::Barrier(store, "bench", absl::StrCat(impl, "/", bytes),
                                world, absl::Seconds(absl::GetFlag(FLAGS_timeout_s))));
  absl::Status status;
  double us = 0;
  const double load_rate = LoadRate(load, [&] {
    us = TimeCalls(2, iterations, [&] {
      if (status.ok()) status = ring.AllReduce(0, count, collectives::DataType::kFloat32);
    });
  });
  RETURN_IF_ERROR(status);
  AllReduceRow row = MakeRow(impl, world, bytes, iterations, us);
  row.set_algorithm(collectives::AlgorithmName(ring.last_algorithm()));
  row.set_load_iterations_per_s(load_rate);
  return row;
}

absl::StatusOr<AllReduceRow> MeasureGloo(GlooGroup& gloo, rdma::Store& store,
                                         int world, int64_t bytes, int iterations,
                                         const ComputeLoad* load) {
  at::Tensor tensor = at::zeros({bytes / 4}, at::kFloat);
  RETURN_IF_ERROR(rdma::Barrier(store, "bench", absl::StrCat("gloo/", bytes), world,
                                absl::Seconds(absl::GetFlag(FLAGS_timeout_s))));
  absl::Status status;
  double us = 0;
  const double load_rate = LoadRate(load, [&] {
    us = TimeCalls(2, iterations, [&] {
      if (status.ok()) status = gloo.AllReduce(tensor);
    });
  });
  RETURN_IF_ERROR(status);
  AllReduceRow row = MakeRow("gloo", world, bytes, iterations, us);
  row.set_load_iterations_per_s(load_rate);
  return row;
}

// `load`: the compute load of this process (threads on rank 0 only); each
// host row records what it got while its calls were timed (device rows: 0).
absl::Status RunRank(int rank, int world, rdma::Store& store, const ComputeLoad* load,
                     std::vector<AllReduceRow>* rows, std::string* description) {
  const absl::Duration timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  const SweepOptions sweep = SweepFromFlags();
  ASSIGN_OR_RETURN(auto transport,
                   rdma::CreateBuiltinTransport(absl::GetFlag(FLAGS_transport),
                                                absl::GetFlag(FLAGS_params), rank));
  if (description != nullptr) *description = transport->capabilities().description;
  collectives::AllReduceGroupOptions options;
  options.ring.name = "bench";
  options.ring.capacity_bytes = sweep.max_bytes;
  options.ring.chunk_bytes = absl::GetFlag(FLAGS_chunk_bytes);
  options.ring.slots = absl::GetFlag(FLAGS_slots);
  options.ring.timeout = timeout;
  ASSIGN_OR_RETURN(options.ring.wait, onesided::WaitPolicy::Parse(absl::GetFlag(FLAGS_wait)));
  options.one_shot_max_bytes = absl::GetFlag(FLAGS_one_shot_max_bytes);
  options.host_chunk_bytes = absl::GetFlag(FLAGS_host_chunk_bytes);
  std::vector<int> members;
  for (int r = 0; r < world; ++r) members.push_back(r);
  // One group per implementation asked for, sharing one progress loop.
  onesided::ProgressLoopOptions loop_options;
  loop_options.name = absl::StrCat("allreduce_bench rank ", rank);
  loop_options.wait = options.ring.wait;
  onesided::ProgressLoop loop(*transport, loop_options);
  options.ring.loop = &loop;
  std::vector<std::pair<std::string, std::unique_ptr<collectives::AllReduceGroup>>> groups;
  std::map<std::string, double> setup_ms;  // by impl
  for (const char* impl : {"rdmaflow", "rdmaflow-ring", "rdmaflow-flat"}) {
    if (!Wants(impl)) continue;
    collectives::AllReduceGroupOptions these = options;
    these.ring.name = impl;
    these.direct = std::string(impl) == "rdmaflow-ring" ? collectives::DirectAccess::kOff
                                                        : collectives::DirectAccess::kAuto;
    these.hierarchy = std::string(impl) == "rdmaflow-flat" ? collectives::Hierarchy::kOff
                                                           : collectives::Hierarchy::kAuto;
    const absl::Time begin = absl::Now();
    ASSIGN_OR_RETURN(auto group, collectives::AllReduceGroup::Create(
                                     *transport, store, "bench", members, these));
    setup_ms[impl] = absl::ToDoubleMilliseconds(absl::Now() - begin);
    groups.emplace_back(impl, std::move(group));
  }
  std::vector<std::unique_ptr<DeviceAllReduceBench>> device_benches;
  double copy_gbps = 0;
  if (const std::string kind = absl::GetFlag(FLAGS_device); !kind.empty()) {
    for (bool ring : {false, true}) {
      if (ring && !Wants("rdmaflow-device-ring")) continue;
      ASSIGN_OR_RETURN(std::unique_ptr<device::DeviceRuntime> runtime,
                       device::CreateDeviceRuntime(kind));
      // A host transport of its own, which the device transport wraps.
      ASSIGN_OR_RETURN(std::unique_ptr<rdma::Transport> host,
                       rdma::CreateBuiltinTransport(absl::GetFlag(FLAGS_transport),
                                                    absl::GetFlag(FLAGS_params), rank));
      DeviceAllReduceBenchOptions device_options;
      device_options.rank = rank;
      device_options.world = world;
      // Twice the largest call: the reference copy runs between the halves.
      device_options.capacity_bytes = 2 * sweep.max_bytes;
      device_options.one_shot_max_bytes = absl::GetFlag(FLAGS_device_one_shot_max_bytes);
      device_options.chunk_bytes = absl::GetFlag(FLAGS_device_chunk_bytes);
      device_options.timeout = timeout;
      device_options.ring = ring;
      device_options.ring_chunk_bytes = absl::GetFlag(FLAGS_chunk_bytes);
      const absl::Time begin = absl::Now();
      ASSIGN_OR_RETURN(std::unique_ptr<DeviceAllReduceBench> bench,
                       DeviceAllReduceBench::Create(std::move(host), std::move(runtime), store,
                                                    device_options));
      setup_ms[bench->impl()] = absl::ToDoubleMilliseconds(absl::Now() - begin);
      device_benches.push_back(std::move(bench));
    }
    // Rank 0 alone, the others waiting at the barrier.
    if (rank == 0) {
      DeviceAllReduceBench& first = *device_benches.front();
      ASSIGN_OR_RETURN(copy_gbps, first.CopyGbps(sweep.max_bytes, 20));
      if (description != nullptr) {
        absl::StrAppend(description, "; device ", first.device_name(), ", copy ",
                        absl::StrFormat("%.1f", copy_gbps), " GB/s (read+write, ",
                        sweep.max_bytes, " bytes)");
      }
    }
    RETURN_IF_ERROR(rdma::Barrier(store, "bench", "device/copy", world, timeout));
  }
  std::unique_ptr<GlooGroup> gloo;
  if (Wants("gloo")) {
    at::set_num_threads(1);
    ASSIGN_OR_RETURN(gloo, GlooGroup::Create(rank, world, store, timeout));
  }
  for (int64_t bytes : SweepSizes(sweep)) {
    const int iterations = Iterations(sweep, bytes);
    std::vector<AllReduceRow> measured;
    for (auto& [impl, group] : groups) {
      ASSIGN_OR_RETURN(AllReduceRow row,
                       MeasureGroup(impl, *group, store, world, bytes, iterations, load));
      row.set_setup_ms(setup_ms[impl]);
      measured.push_back(row);
    }
    for (const auto& bench : device_benches) {
      ASSIGN_OR_RETURN(AllReduceRow row, bench->Measure(bytes, iterations, copy_gbps));
      row.set_setup_ms(setup_ms[bench->impl()]);
      measured.push_back(row);
    }
    if (gloo != nullptr) {
      ASSIGN_OR_RETURN(AllReduceRow row,
                       MeasureGloo(*gloo, store, world, bytes, iterations, load));
      measured.push_back(row);
    }
    if (rows == nullptr) continue;
    for (const AllReduceRow& row : measured) {
      std::fprintf(stderr, "  %d ranks %10lld bytes %-13s %10.1f us %8.3f GB/s bus %s\n",
                   world, static_cast<long long>(bytes), row.impl().c_str(),
                   row.time_us(), row.busbw_gbps(), row.algorithm().c_str());
      rows->push_back(row);
    }
  }
  absl::Status status;
  for (auto& [impl, group] : groups) status.Update(group->Shutdown());
  for (const auto& bench : device_benches) status.Update(bench->Shutdown());
  return status;
}

int Report(absl::Status status, int rank) {
  if (status.ok()) return 0;
  std::fprintf(stderr, "rank %d: %s\n", rank, status.ToString().c_str());
  return 1;
}

int Main(int argc, char** argv) {
  rdmaflow::ParseProgramFlags(argc, argv,
      "All-reduce latency and bus bandwidth: rdmaflow's ring next to "
      "Gloo, same processes, same run.\n  allreduce_bench [--ranks=2,4] "
      "[--impls=rdmaflow,gloo] [--transport=ucx --params=tls=shm] [--device=cuda|fake] "
      "[--json=out.json]");
  const absl::Time start = absl::Now();
  if (absl::StatusOr<onesided::WaitPolicy> wait =
          onesided::WaitPolicy::Parse(absl::GetFlag(FLAGS_wait));
      !wait.ok()) {
    std::fprintf(stderr, "--wait: %s\n", wait.status().ToString().c_str());
    return 2;
  }
  if (const std::string kind = absl::GetFlag(FLAGS_device);
      !kind.empty() && kind != "cuda" && kind != "fake") {
    std::fprintf(stderr, "--device: '%s' is not cuda or fake\n", kind.c_str());
    return 2;
  }
  if (Wants("rdmaflow-device-ring") && absl::GetFlag(FLAGS_device).empty()) {
    std::fprintf(stderr, "--impls: rdmaflow-device-ring needs --device=cuda or fake\n");
    return 2;
  }
  const int load = absl::GetFlag(FLAGS_load);
  if (load < 0 || load > 64) {
    std::fprintf(stderr, "--load: %d is not a thread count in 0..64\n", load);
    return 2;
  }
  std::vector<int> counts;
  absl::StatusOr<std::vector<int>> rank_counts = counts;
  for (absl::string_view text : absl::StrSplit(absl::GetFlag(FLAGS_ranks), ',')) {
    int world = 0;
    if (!absl::SimpleAtoi(text, &world) || world < 2 || world > 256) {
      rank_counts = absl::InvalidArgumentError(
          absl::StrCat("--ranks: '", text, "' is not a rank count in 2..256"));
      break;
    }
    rank_counts->push_back(world);
  }
  for (absl::Status status :
       {CheckImpls(), CheckSweepOptions(SweepFromFlags()), rank_counts.status()}) {
    if (!status.ok()) {
      std::fprintf(stderr, "allreduce_bench: %s (see allreduce_bench --help)\n",
                   std::string(status.message()).c_str());
      return kExitUsage;
    }
  }
  std::vector<AllReduceRow> rows;
  std::string description;
  // In the process of rank 0, beside all ranks.
  const char* launched_rank = std::getenv("RANK");
  ComputeLoad compute(launched_rank == nullptr || std::string(launched_rank) == "0" ? load : 0);
  if (launched_rank != nullptr) {
    // One rank of a job someone else started: rank 0 reports it.
    bool reports = false;
    const int code = launch::RunLaunchedRank([&](int rank, int world, rdma::Store& store) {
      reports = rank == 0;
      return Report(RunRank(rank, world, store, &compute, reports ? &rows : nullptr,
                            reports ? &description : nullptr),
                    rank);
    });
    if (code != 0 || !reports) return code;
  } else {
    for (const int world : *rank_counts) {
      std::fprintf(stderr, "allreduce_bench: %d ranks\n", world);
      const int code = launch::RunLocalJob(world, argv, {}, [&](rdma::Store& store) {
        return Report(RunRank(0, world, store, &compute, &rows, &description), 0);
      });
      if (code != 0) return code;
    }
  }
  const int64_t reference = std::min<int64_t>(absl::GetFlag(FLAGS_max_bytes), 16 << 20);
  compute.Stop();  // memcpy and the reduce are measured alone
  const double memcpy_gbps = MemcpyGbps(reference);
  const double reduce_gbps = ReduceGbps(reference);
  std::map<double, double> reduce_bound;  // by size
  for (AllReduceRow& row : rows) {
    // A device row's bound is the device's (or, for the ring, the bus's).
    if (absl::StartsWith(row.impl(), "rdmaflow-device")) continue;
    auto [it, fresh] = reduce_bound.try_emplace(row.bytes(), 0.0);
    if (fresh) it->second = ReduceGbps(static_cast<int64_t>(row.bytes()));
    row.set_reduce_bound_gbps(it->second);
  }
  std::printf("# allreduce_bench: %s; wait %s; compute load %d threads (%.0f M iterations)\n"
              "# memcpy %.2f GB/s, float32 sum %.2f GB/s (one thread, %lld bytes)\n",
              description.c_str(), absl::GetFlag(FLAGS_wait).c_str(), load,
              compute.iterations() / 1e6, memcpy_gbps, reduce_gbps,
              static_cast<long long>(reference));
  PrintRows(rows);
  // rdmaflow against each other implementation measured, size by size.
  std::map<std::pair<int, double>, std::map<std::string, double>> busbw;
  std::vector<std::string> baselines;
  for (const AllReduceRow& r : rows) {
    busbw[{r.ranks(), r.bytes()}][r.impl()] = r.busbw_gbps();
    if (r.impl() != "rdmaflow" &&
        std::find(baselines.begin(), baselines.end(), r.impl()) == baselines.end()) {
      baselines.push_back(r.impl());
    }
  }
  if (Wants("rdmaflow") && !baselines.empty()) {
    std::printf("\n%5s %11s", "ranks", "bytes");
    for (const std::string& b : baselines) std::printf(" %22s", ("rdmaflow/" + b).c_str());
    std::printf("\n");
    for (const auto& [key, impls] : busbw) {
      if (impls.count("rdmaflow") == 0) continue;
      std::printf("%5d %11.0f", key.first, key.second);
      for (const std::string& b : baselines) {
        if (impls.count(b) == 0 || impls.at(b) <= 0) {
          std::printf(" %22s", "-");
        } else {
          std::printf(" %21.2fx", impls.at("rdmaflow") / impls.at(b));
        }
      }
      std::printf("\n");
    }
  }
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    results::RunInfo run = results::NewRunInfo("allreduce_bench", start);
    run.set_transport(absl::GetFlag(FLAGS_transport));
    run.set_params(absl::GetFlag(FLAGS_params));
    run.set_description(absl::StrCat(description, "; wait ", absl::GetFlag(FLAGS_wait),
                                     "; compute load ", load, " threads"));
    const absl::Status written =
        WriteRowsJson(path, run, memcpy_gbps, reduce_gbps, rows);
    if (!written.ok()) {
      std::fprintf(stderr, "%s\n", written.ToString().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace rdmaflow::bench

int main(int argc, char** argv) { return rdmaflow::bench::Main(argc, argv); }
