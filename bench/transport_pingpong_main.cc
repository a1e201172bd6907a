// transport_pingpong: perftest-style write/read ping-pong between two ranks
// over any rdmaflow transport, compared with memcpy in the same run.
//
//   transport_pingpong --transport=ucx --params=tls=shm
//   transport_pingpong --params=tls=shm --memory=device --device=cuda
//
// Without RANK/WORLD_SIZE in the environment it starts rank 1 itself (a
// second process, or a thread with --mode=thread) and rendezvouses through
// the TCPStore; under torchrun/mpirun/Slurm each process is one rank.

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/pingpong.h"
#include "bench/pingpong_device.h"
#include "common/program_flags.h"
#include "device/runtime_factory.h"
#include "launch/launcher.h"
#include "launch/rank.h"
#include "rdma/builtin_transports.h"
#include "rdma/testing/in_memory_store.h"
#include "results/json.h"
#include "results/results.pb.h"
#include "results/run_info.h"

ABSL_FLAG(std::string, transport, "ucx",
          "Transport backend: ucx, ibverbs or loopback (loopback needs --mode=thread).");
ABSL_FLAG(std::string, params, "",
          "Backend parameters key=value,... (docs/configuration.md says what "
          "each does). ucx: tls, net_devices, keepalive_ms, max_outstanding, notify, tcp_tx_seg_kb, streaming_copy_kb. "
          "ibverbs: device, port, gid_index, bootstrap_host, bind_address, "
          "world_size, max_outstanding, signal_every, max_inline, "
          "ack_timeout, retry_count, notify=imm|flag, notify_slots, events, "
          "qps_per_peer, stripe_min, connect, max_endpoints_per_peer. "
          "loopback: max_outstanding. E.g. tls=shm. Empty: the backend's "
          "defaults.");
ABSL_FLAG(std::string, memory, "host",
          "Memory the ping-pong moves: host, or device (GPU memory through "
          "rdma/device: CUDA IPC copies between the two ranks of one host, "
          "notifications through --transport; needs --mode=process or a launcher).");
ABSL_FLAG(std::string, device, "cuda",
          "With --memory=device, the device runtime: cuda (device 0), or fake "
          "(host shared memory standing in for a GPU, for machines without one). "
          "The memcpy column is then a copy between two buffers of that device.");
ABSL_FLAG(std::string, device_path, "ipc",
          "With --memory=device: ipc (the ranks map each other's device memory, as on one "
          "host), or staged (each rank claims a host of its own, so every transfer goes "
          "through pinned host memory in chunks: the path to another host's GPU).");
ABSL_FLAG(int64_t, staging_slot_bytes, 1 << 20,
          "--device_path=staged: bytes of each staging slot (8 slots a peer).");
ABSL_FLAG(std::string, mode, "process",
          "How rank 1 runs when not launched by torchrun: process or thread.");
ABSL_FLAG(int64_t, min_bytes, 8, "Smallest message size.");
ABSL_FLAG(int64_t, max_bytes, int64_t{64} << 20, "Largest message size.");
ABSL_FLAG(int64_t, byte_budget, int64_t{1} << 30,
          "Bytes per size and measurement (iterations = budget / size).");
ABSL_FLAG(int32_t, max_iters, 2000, "Upper bound on iterations per size.");
ABSL_FLAG(bool, writes, true,
          "Measure one-sided writes (the ping-pong with notifications and "
          "the bandwidth); --nowrites with --reads measures reads alone, as "
          "ib_read_lat and ib_read_bw do.");
ABSL_FLAG(bool, reads, true, "Also measure one-sided reads.");
ABSL_FLAG(int64_t, owner_busy_ms, 0,
          "With reads, > 0: at each size also 3 reads while rank 1, whose "
          "memory is read, serves 5 ms and then computes this long without "
          "progressing its transport, as a training rank does "
          "(busy_read_p50_us in the JSON and the 'busy read' lines): where "
          "reads need the owner's progress (UCX over TCP), how much less "
          "than this the read is delayed is what the owner's socket carried "
          "on alone (tools/calibrate_sim.sh). 0: off.");
ABSL_FLAG(std::string, signal, "notification",
          "How each ping-pong write announces itself: notification (a "
          "notified write, taken from the transport's notification queue) "
          "or flag (a flagged write: a flag word right behind the data that "
          "the peer polls in its own memory, as perftest polls the last "
          "byte; host memory over ucx or loopback; bound once per size, "
          "Endpoint::BindFlaggedWrite, and posted with no completion where "
          "the write is done at once, BoundFlaggedWrite::TryPostInline), "
          "flag_signalled (bound, each post with a completion) or "
          "flag_unbound (each write posted with its slices checked and "
          "looked up again, Endpoint::PostWriteWithFlag).");
ABSL_FLAG(std::string, read, "posted",
          "How each read is posted: posted (Endpoint::PostRead, checked and "
          "looked up each time), bound (bound once per size, "
          "Endpoint::BindRead, a completion each post) or inline (bound, "
          "and done with no completion where the backend reads at once, "
          "BoundRead::TryPostInline: a copy out of a same-host peer's "
          "mapped memory over ucx).");
ABSL_FLAG(std::string, json, "", "Write the results as JSON to this file.");
ABSL_FLAG(std::string, tsv, "", "Write the results as TSV (for plotting).");

namespace rdmaflow::bench {
namespace {

// --device_path=staged: each rank claims a host of its own.
rdma::device_path::DeviceTransportOptions DeviceOptionsFromFlags(int rank) {
  rdma::device_path::DeviceTransportOptions options;
  if (absl::GetFlag(FLAGS_device_path) == "staged") {
    options.host_identity = absl::StrCat("transport_pingpong-staged-rank-", rank);
  }
  options.staging.slot_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_staging_slot_bytes));
  return options;
}

// kInvalidArgument naming the flag whose value cannot be measured; checked
// before rank 1 is started.
absl::Status CheckSizeFlags() {
  constexpr int64_t kLargest = int64_t{1} << 40;
  const int64_t min_bytes = absl::GetFlag(FLAGS_min_bytes);
  const int64_t max_bytes = absl::GetFlag(FLAGS_max_bytes);
  if (min_bytes < 1 || min_bytes > kLargest) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--min_bytes=", min_bytes, ": expected 1 .. ", kLargest));
  }
  if (max_bytes < min_bytes || max_bytes > kLargest) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_bytes=", max_bytes, ": expected ", min_bytes,
        " (--min_bytes) .. ", kLargest));
  }
  if (absl::GetFlag(FLAGS_byte_budget) < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--byte_budget=", absl::GetFlag(FLAGS_byte_budget),
        ": expected at least 1"));
  }
  if (const int min_iters = PingPongOptions().min_iters;
      absl::GetFlag(FLAGS_max_iters) < min_iters) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_iters=", absl::GetFlag(FLAGS_max_iters),
                     ": expected at least ", min_iters));
  }
  if (const std::string signal = absl::GetFlag(FLAGS_signal);
      signal != "notification" && signal != "flag" && signal != "flag_signalled" &&
      signal != "flag_unbound") {
    return absl::InvalidArgumentError(
        absl::StrCat("--signal=", signal,
                     ": expected notification, flag, flag_signalled or flag_unbound"));
  }
  if (const std::string read = absl::GetFlag(FLAGS_read);
      read != "posted" && read != "bound" && read != "inline") {
    return absl::InvalidArgumentError(
        absl::StrCat("--read=", read, ": expected posted, bound or inline"));
  }
  if (!absl::GetFlag(FLAGS_writes) && !absl::GetFlag(FLAGS_reads)) {
    return absl::InvalidArgumentError(
        "--nowrites and --noreads: nothing to measure");
  }
  if (const int64_t busy = absl::GetFlag(FLAGS_owner_busy_ms); busy < 0 || busy > 60000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--owner_busy_ms=", busy, ": expected 0 (off) to 60000"));
  }
  if (absl::GetFlag(FLAGS_owner_busy_ms) > 0 && !absl::GetFlag(FLAGS_reads)) {
    return absl::InvalidArgumentError("--owner_busy_ms times reads: not with --noreads");
  }
  return absl::OkStatus();
}

PingPongOptions OptionsFromFlags() {
  PingPongOptions options;
  options.min_bytes = absl::GetFlag(FLAGS_min_bytes);
  options.max_bytes = absl::GetFlag(FLAGS_max_bytes);
  options.byte_budget = absl::GetFlag(FLAGS_byte_budget);
  options.max_iters = absl::GetFlag(FLAGS_max_iters);
  options.writes = absl::GetFlag(FLAGS_writes);
  options.reads = absl::GetFlag(FLAGS_reads);
  options.owner_busy = absl::Milliseconds(absl::GetFlag(FLAGS_owner_busy_ms));
  if (absl::GetFlag(FLAGS_signal) == "flag") {
    options.signal = PingPongOptions::Signal::kFlagWord;
  } else if (absl::GetFlag(FLAGS_signal) == "flag_signalled") {
    options.signal = PingPongOptions::Signal::kFlagWordSignalled;
  } else if (absl::GetFlag(FLAGS_signal) == "flag_unbound") {
    options.signal = PingPongOptions::Signal::kFlagWordUnbound;
  }
  if (absl::GetFlag(FLAGS_read) == "bound") {
    options.read_post = PingPongOptions::ReadPost::kBound;
  } else if (absl::GetFlag(FLAGS_read) == "inline") {
    options.read_post = PingPongOptions::ReadPost::kInline;
  }
  return options;
}

void PrintTable(const std::vector<PingPongRow>& rows) {
  std::printf(
      "%-6s %10s %6s %11s %11s %9s %8s %8s %8s %8s %11s %7s\n", "op", "bytes",
      "iters", "bw_peak", "bw_avg", "Mmsg/s", "lat_min", "lat_p50", "lat_p99",
      "p99.9", "memcpy", "ratio");
  std::printf("%-6s %10s %6s %11s %11s %9s %8s %8s %8s %8s %11s %7s\n", "", "",
              "", "MB/s", "MB/s", "", "us", "us", "us", "us", "MB/s", "");
  for (const PingPongRow& r : rows) {
    std::printf(
        "%-6s %10.0f %6d %11.1f %11.1f %9.3f %8.2f %8.2f %8.2f %8.2f %11.1f "
        "%7.2f\n",
        r.op().c_str(), r.bytes(), r.iterations(), r.bw_peak_mbps(),
        r.bw_avg_mbps(), r.msg_rate_mops(), r.lat_min_us(), r.lat_p50_us(),
        r.lat_p99_us(), r.lat_p999_us(), r.memcpy_mbps(), r.ratio_to_memcpy());
  }
  for (const PingPongRow& r : rows) {
    if (r.owner_busy_ms() <= 0) continue;
    std::printf("busy read %10.0f bytes: %.0f us with the owner computing %.0f ms (idle: %.0f us)\n",
                r.bytes(), r.busy_read_p50_us(), r.owner_busy_ms(), r.lat_p50_us());
  }
}

absl::Status WriteJson(const std::string& path, absl::Time start,
                       const std::string& description,
                       const std::vector<PingPongRow>& rows) {
  results::BenchmarkReport report;
  results::RunInfo& run = *report.mutable_run();
  run = results::NewRunInfo("transport_pingpong", start);
  run.set_transport(absl::GetFlag(FLAGS_transport));
  run.set_params(absl::GetFlag(FLAGS_params));
  run.set_description(description);
  run.set_world_size(2);
  for (const PingPongRow& row : rows) *report.mutable_pingpong()->add_rows() = row;
  return results::WriteJsonFile(report, path);
}

// The same rows in perftest's layout and units (MB = 2^20 bytes, as its
// ib_*_bw print by default), one table per perftest tool, so that the two
// outputs can be put side by side (tools/bench_ibverbs_vm.sh does).
void PrintPerftestTables(const std::vector<PingPongRow>& rows) {
  constexpr double kMiB = 1024.0 * 1024.0;
  for (const char* op : {"write", "read"}) {
    bool any = false;
    for (const PingPongRow& r : rows) any = any || r.op() == op;
    if (!any) continue;
    std::printf(
        "\n# as ib_%s_lat (%s)\n"
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]"
        "    t_avg[usec]    t_stdev[usec]   99%% percentile[usec]   99.9%% "
        "percentile[usec]\n",
        op, std::string(op) == "write"
                ? "one-way: half the time between two posts of the ping-pong, "
                  "each a write with notification"
                : "the time between two posts, each after the last read "
                  "completed");
    for (const PingPongRow& r : rows) {
      if (r.op() != op) continue;
      std::printf(" %-7.0f %-10d %-14.2f %-12.2f %-16.2f %-15.2f %-15.2f "
                  "%-22.2f %.2f\n",
                  r.bytes(), r.iterations(), r.lat_min_us(), r.lat_max_us(),
                  r.lat_p50_us(), r.lat_avg_us(), r.lat_stdev_us(),
                  r.lat_p99_us(), r.lat_p999_us());
    }
    std::printf(
        "\n# as ib_%s_bw\n"
        " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   "
        "MsgRate[Mpps]\n",
        op);
    for (const PingPongRow& r : rows) {
      if (r.op() != op) continue;
      std::printf(" %-10.0f %-14d %-18.2f %-20.2f %.6f\n", r.bytes(),
                  r.iterations(), r.bw_peak_mbps() * 1e6 / kMiB,
                  r.bw_avg_mbps() * 1e6 / kMiB, r.msg_rate_mops());
    }
  }
}

bool WriteTsv(const std::string& path, const std::vector<PingPongRow>& rows) {
  std::ofstream out(path);
  out << "op\tbytes\tbw_avg_mbps\tmemcpy_mbps\tlat_p50_us\tratio\n";
  for (const PingPongRow& r : rows) {
    out << r.op() << "\t" << static_cast<int64_t>(r.bytes()) << "\t"
        << r.bw_avg_mbps() << "\t" << r.memcpy_mbps() << "\t" << r.lat_p50_us()
        << "\t" << r.ratio_to_memcpy() << "\n";
  }
  return out.good();
}

// One rank's whole run; rank 0 prints.
int RunRank(int rank, rdma::Store& store) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<rdma::Transport>> transport = rdma::CreateBuiltinTransport(
      absl::GetFlag(FLAGS_transport), absl::GetFlag(FLAGS_params), rank);
  if (!transport.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank,
                 transport.status().ToString().c_str());
    return 1;
  }
  PingPongOptions options = OptionsFromFlags();
  rdma::Transport* moving = transport->get();
  std::unique_ptr<DevicePingPong> device_memory;
  if (absl::GetFlag(FLAGS_memory) == "device") {
    absl::StatusOr<std::unique_ptr<device::DeviceRuntime>> runtime =
        device::CreateDeviceRuntime(absl::GetFlag(FLAGS_device));
    absl::StatusOr<std::unique_ptr<DevicePingPong>> made =
        runtime.ok() ? DevicePingPong::Create(std::move(*transport), std::move(*runtime),
                                              options.max_bytes, DeviceOptionsFromFlags(rank))
                     : runtime.status();
    if (!made.ok()) {
      std::fprintf(stderr, "rank %d: device memory: %s\n", rank,
                   made.status().ToString().c_str());
      return 1;
    }
    device_memory = std::move(*made);
    device_memory->Apply(options);
    options.reads_need_target = absl::GetFlag(FLAGS_device_path) == "staged";
    moving = &device_memory->transport();
  }
  if (rank == 0) {
    std::printf("# transport_pingpong: %s\n", moving->capabilities().description.c_str());
    if (device_memory != nullptr) {
      std::printf("# memory: device (%s), %s path; memcpy: a copy within that device\n",
                  device_memory->runtime().name().c_str(),
                  absl::GetFlag(FLAGS_device_path).c_str());
    }
    std::fflush(stdout);
    options.on_connected = [](const std::string& lanes) {
      // Device information, as comment lines above the table.
      for (absl::string_view line : absl::StrSplit(lanes, '\n', absl::SkipEmpty())) {
        line = absl::StripAsciiWhitespace(absl::StripPrefix(line, "#"));
        if (!line.empty()) std::printf("#   %s\n", std::string(line).c_str());
      }
      std::fflush(stdout);
    };
    options.on_size_done = [](size_t bytes) {
      std::fprintf(stderr, "  measured %zu bytes\n", bytes);
    };
  }
  absl::StatusOr<std::vector<PingPongRow>> rows =
      RunPingPong(*moving, store, options);
  if (!rows.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank,
                 rows.status().ToString().c_str());
    return 1;
  }
  if (device_memory != nullptr) {
    const absl::Status closed = device_memory->CloseMappings(store, absl::Now() + options.timeout);
    if (!closed.ok()) {
      std::fprintf(stderr, "rank %d: closing its mappings of the peer's device memory: %s\n",
                   rank, closed.ToString().c_str());
      return 1;
    }
  }
  if (rank != 0) return 0;
  PrintTable(*rows);
  PrintPerftestTables(*rows);
  std::string description = moving->capabilities().description;
  if (device_memory != nullptr) {
    description += absl::StrCat("; device memory (", device_memory->runtime().name(), ")");
  }
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    const absl::Status written = WriteJson(path, start, description, *rows);
    if (!written.ok()) {
      std::fprintf(stderr, "%s\n", written.ToString().c_str());
      return 1;
    }
  }
  if (const std::string path = absl::GetFlag(FLAGS_tsv); !path.empty() &&
      !WriteTsv(path, *rows)) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return 1;
  }
  return 0;
}

int Main(int argc, char** argv) {
  rdmaflow::ParseProgramFlags(argc, argv,
      "Write/read ping-pong between two ranks over an rdmaflow transport, "
      "with memcpy as the physical limit; the results are also printed in "
      "perftest's columns (ib_write_lat, ib_write_bw, ib_read_lat, "
      "ib_read_bw).\n  transport_pingpong "
      "[--transport=ucx --params=tls=shm] [--mode=process|thread] "
      "[--memory=host|device --device=cuda|fake] [--json=out.json]");

  // Checked before any rank starts, launched or local.
  const std::string mode = absl::GetFlag(FLAGS_mode);
  const std::string memory = absl::GetFlag(FLAGS_memory);
  const std::string device_path = absl::GetFlag(FLAGS_device_path);
  if (device_path != "ipc" && device_path != "staged") {
    std::fprintf(stderr, "--device_path must be ipc or staged, got '%s'\n", device_path.c_str());
    return 2;
  }
  if (absl::Status status = CheckSizeFlags(); !status.ok()) {
    std::fprintf(stderr, "transport_pingpong: %s (see transport_pingpong --help)\n",
                 std::string(status.message()).c_str());
    return kExitUsage;
  }
  if (memory != "host" && memory != "device") {
    std::fprintf(stderr, "--memory must be host or device, got '%s'\n", memory.c_str());
    return 2;
  }
  if (std::getenv("RANK") != nullptr) {  // Launched by torchrun/mpirun.
    return launch::RunLaunchedRank([](int rank, int world_size, rdma::Store& store) {
      if (world_size != 2) {
        std::fprintf(stderr, "the ping-pong needs WORLD_SIZE=2, got %d\n",
                     world_size);
        return 2;
      }
      return RunRank(rank, store);
    });
  }

  if (memory == "device" && (mode == "thread" || absl::GetFlag(FLAGS_transport) == "loopback")) {
    std::fprintf(stderr,
                 "--memory=device needs the ranks in two processes (CUDA opens no IPC "
                 "handle in the process that exported it): --mode=process over ucx or "
                 "ibverbs, or a launcher\n");
    return 2;
  }
  if (mode == "thread" || absl::GetFlag(FLAGS_transport) == "loopback") {
    rdma::testing::InMemoryStore store;
    int peer_status = 0;
    std::thread peer([&] { peer_status = RunRank(1, store); });
    const int status = RunRank(0, store);
    peer.join();
    return status != 0 ? status : peer_status;
  }
  if (mode != "process") {
    std::fprintf(stderr, "--mode must be process or thread, got '%s'\n",
                 mode.c_str());
    return 2;
  }
  // Rank 0 hosts the store on a free port and starts rank 1 as a child.
  return launch::RunLocalJob(2, argv, {},
                             [](rdma::Store& store) { return RunRank(0, store); });
}

}  // namespace
}  // namespace rdmaflow::bench

int main(int argc, char** argv) { return rdmaflow::bench::Main(argc, argv); }
