// device_ipc_bench: what device memory costs to move between two processes
// on one GPU through the device runtime's IPC (docs/device.md), next to a
// copy inside one process's device memory, the bound:
//   - local copy: cudaMemcpyAsync device to device in one process;
//   - IPC write / read: a copy into / out of the peer's mapped allocation;
//   - transport write: the same write through rdma/device's DeviceTransport
//     (UCX over shared memory carrying a notification after each copy);
//   - all-reduce: two ranks sum `bytes` of float32 in place, each summing
//     its half of both buffers and writing the sum into both.
// The launcher is rank 0; it starts rank 1 as this same binary and talks to
// it over a socket pair (handles, barriers). Prints a table and, with
// --json, a BenchmarkReport.
//
//   device_ipc_bench [--device=cuda|fake] [--mib=1,4,16,64,256,1024]
//                    [--iterations=20] [--algorithm=split|leader] [--json=PATH]
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/program_flags.h"
#include "common/status_macros.h"
#include "device/device_runtime.h"
#include "device/runtime_factory.h"
#include "results/json.h"
#include "results/results.pb.h"
#include "rdma/device/device_transport.h"
#include "rdma/blocking.h"
#include "rdma/builtin_transports.h"
#include "results/run_info.h"

ABSL_FLAG(std::string, device, "cuda", "The device runtime: cuda (device 0) or fake.");
ABSL_FLAG(std::string, mib, "1,4,16,64,256,1024", "Transfer sizes, MiB, comma-separated.");
ABSL_FLAG(int, iterations, 20, "Timed calls per size and operation (after 3 untimed).");
ABSL_FLAG(std::string, json, "", "Also write the results here as a BenchmarkReport.");
ABSL_FLAG(std::string, algorithm, "split",
          "The all-reduce: split (each rank sums its half of both buffers, as on two "
          "GPUs) or leader (rank 0 sums all of it: on one GPU shared by two processes "
          "their kernels take turns, and one rank's kernels never wait for the other's).");
ABSL_FLAG(int, peer_fd, -1, "(internal) set on rank 1, the socket to rank 0.");

namespace rdmaflow::bench {
namespace {

using device::DeviceMemory;
using device::DeviceRuntime;
using device::Event;
using device::IpcHandle;
using device::Stream;

constexpr absl::Duration kTimeout = absl::Seconds(60);
constexpr int kWarmup = 3;

// The socket to the other rank: whole messages, each wait bounded.
class PeerLink {
 public:
  explicit PeerLink(int fd) : fd_(fd) {}
  ~PeerLink() { close(fd_); }

  absl::Status Send(const void* data, size_t bytes) {
    const auto* at = static_cast<const char*>(data);
    while (bytes > 0) {
      const ssize_t n = send(fd_, at, bytes, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return absl::UnavailableError(absl::StrCat("the peer rank hung up: ", strerror(errno)));
      at += n;
      bytes -= static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

  absl::Status Receive(void* data, size_t bytes) {
    auto* at = static_cast<char*>(data);
    const absl::Time deadline = absl::Now() + kTimeout;
    while (bytes > 0) {
      pollfd p{fd_, POLLIN, 0};
      const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
      if (left_ms <= 0) return absl::DeadlineExceededError("the peer rank did not answer in 60 s");
      if (poll(&p, 1, static_cast<int>(left_ms)) <= 0) continue;
      const ssize_t n = recv(fd_, at, bytes, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return absl::UnavailableError("the peer rank hung up");
      at += n;
      bytes -= static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

  absl::Status SendString(const std::string& text) {
    const uint32_t size = static_cast<uint32_t>(text.size());
    RETURN_IF_ERROR(Send(&size, sizeof(size)));
    return Send(text.data(), text.size());
  }

  absl::StatusOr<std::string> ReceiveString() {
    uint32_t size = 0;
    RETURN_IF_ERROR(Receive(&size, sizeof(size)));
    if (size > (1u << 20)) return absl::InternalError("the peer rank sent an oversized message");
    std::string text(size, '\0');
    RETURN_IF_ERROR(Receive(text.data(), size));
    return text;
  }

  // Both ranks have reached this point.
  absl::Status Barrier() {
    const char token = 'b';
    char seen = 0;
    RETURN_IF_ERROR(Send(&token, 1));
    RETURN_IF_ERROR(Receive(&seen, 1));
    if (seen != token) return absl::InternalError("the ranks' barriers went out of step");
    return absl::OkStatus();
  }

 private:
  const int fd_;
};

// Waits for `event` by spinning on Done(): the backoff of Event::WaitUntil
// would add up to 200 us to every timed call.
absl::Status Spin(Event& event, const std::string& what) {
  const absl::Time deadline = absl::Now() + kTimeout;
  while (true) {
    ASSIGN_OR_RETURN(bool done, event.Done());
    if (done) return absl::OkStatus();
    if (absl::Now() > deadline) return absl::DeadlineExceededError(absl::StrCat(what, ": 60 s"));
  }
}

// What one rank holds: its buffer (the all-reduce's data, the one the peer
// maps), a scratch buffer, the peer's buffer mapped, a stream and an event.
struct Rank {
  int rank = 0;
  std::unique_ptr<DeviceRuntime> runtime;
  DeviceMemory mine;
  DeviceMemory scratch;
  DeviceMemory peer;
  std::unique_ptr<Stream> stream;
  std::unique_ptr<Event> done;
  std::unique_ptr<PeerLink> link;
  // The transport path: rank 0 writes its region into rank 1's.
  std::unique_ptr<rdma::device_path::DeviceTransport> transport;
  std::unique_ptr<rdma::Endpoint> endpoint;
  rdma::MemoryRegion region;
  rdma::RemoteRegion peer_region;

  absl::Status Finish(const std::string& what) {
    RETURN_IF_ERROR(stream->Record(*done));
    return Spin(*done, what);
  }
};

absl::StatusOr<Rank> SetUp(int rank, const std::string& kind, size_t max_bytes, int fd) {
  Rank r;
  r.rank = rank;
  r.link = std::make_unique<PeerLink>(fd);
  ASSIGN_OR_RETURN(r.runtime, device::CreateDeviceRuntime(kind));
  ASSIGN_OR_RETURN(r.mine, r.runtime->Allocate(max_bytes));
  ASSIGN_OR_RETURN(r.scratch, r.runtime->Allocate(max_bytes));
  ASSIGN_OR_RETURN(r.stream, r.runtime->CreateStream());
  ASSIGN_OR_RETURN(r.done, r.runtime->CreateEvent());
  ASSIGN_OR_RETURN(IpcHandle own, r.runtime->ExportIpc(r.mine.data()));
  IpcHandle theirs;
  RETURN_IF_ERROR(r.link->Send(own.bytes.data(), own.bytes.size()));
  RETURN_IF_ERROR(r.link->Receive(theirs.bytes.data(), theirs.bytes.size()));
  ASSIGN_OR_RETURN(r.peer, r.runtime->OpenIpc(theirs));
  if (r.peer.size() < max_bytes) {
    return absl::InternalError("the peer's mapped buffer is smaller than the largest size");
  }
  // The transport's regions are allocations of their own: CUDA maps one
  // allocation once per process, and `peer` already is.
  ASSIGN_OR_RETURN(std::unique_ptr<rdma::Transport> host,
                   rdma::CreateBuiltinTransport("ucx", "tls=shm", rank));
  ASSIGN_OR_RETURN(r.transport,
                   rdma::device_path::DeviceTransport::Create(std::move(host), r.runtime.get()));
  ASSIGN_OR_RETURN(r.region, r.transport->AllocateDevice(max_bytes));
  RETURN_IF_ERROR(r.link->SendString(r.transport->address()));
  RETURN_IF_ERROR(r.link->SendString(r.region.descriptor().Serialize()));
  ASSIGN_OR_RETURN(std::string address, r.link->ReceiveString());
  ASSIGN_OR_RETURN(std::string descriptor, r.link->ReceiveString());
  ASSIGN_OR_RETURN(r.peer_region, rdma::RemoteRegion::Parse(descriptor));
  ASSIGN_OR_RETURN(r.endpoint, r.transport->Connect({1 - rank, address}));
  RETURN_IF_ERROR(r.endpoint->Prepare(r.peer_region));
  return r;
}

// Seconds per write of `bytes` through the transport, each with a
// notification, `iterations` posted back to back after kWarmup: rank 0
// writes and times, rank 1 waits for every notification.
absl::StatusOr<double> TimeTransportWrites(Rank& r, size_t bytes, int iterations) {
  const absl::Time deadline = absl::Now() + kTimeout;
  const int total = kWarmup + iterations;
  if (r.rank == 1) {
    for (int i = 0; i < total; ++i) {
      ASSIGN_OR_RETURN(rdma::Notification note, rdma::WaitNotification(*r.transport, deadline));
      if (note.value != static_cast<uint32_t>(i)) {
        return absl::InternalError(absl::StrCat("notification ", note.value, " came ", i, "th"));
      }
    }
    RETURN_IF_ERROR(r.link->Barrier());
    return 0.0;
  }
  int fired = 0;
  absl::Status failed;
  auto post = [&](int i) -> absl::Status {
    while (true) {
      absl::Status posted = r.endpoint->PostWrite(
          {&r.region, 0, bytes}, {&r.peer_region, 0, bytes}, static_cast<uint32_t>(i),
          [&](absl::Status status) {
            ++fired;
            if (!status.ok()) failed = status;
          });
      if (!absl::IsResourceExhausted(posted)) return posted;
      RETURN_IF_ERROR(r.transport->Progress().status());
      if (absl::Now() > deadline) return absl::DeadlineExceededError("transport writes");
    }
  };
  auto wait = [&](int count) {
    return rdma::ProgressUntil(*r.transport, [&] { return fired >= count; }, deadline,
                               "transport writes");
  };
  for (int i = 0; i < kWarmup; ++i) RETURN_IF_ERROR(post(i));
  RETURN_IF_ERROR(wait(kWarmup));
  const absl::Time start = absl::Now();
  for (int i = kWarmup; i < total; ++i) RETURN_IF_ERROR(post(i));
  RETURN_IF_ERROR(wait(total));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start) / iterations;
  RETURN_IF_ERROR(failed);
  RETURN_IF_ERROR(r.link->Barrier());
  return seconds;
}

// Seconds per call of `bytes` copied from `src` to `dst`, `iterations` calls
// queued back to back after kWarmup.
absl::StatusOr<double> TimeCopies(Rank& r, void* dst, const void* src, size_t bytes,
                                  int iterations) {
  for (int i = 0; i < kWarmup; ++i) RETURN_IF_ERROR(r.stream->Copy(dst, src, bytes));
  RETURN_IF_ERROR(r.Finish("warm-up copies"));
  const absl::Time start = absl::Now();
  for (int i = 0; i < iterations; ++i) RETURN_IF_ERROR(r.stream->Copy(dst, src, bytes));
  RETURN_IF_ERROR(r.Finish("timed copies"));
  return absl::ToDoubleSeconds(absl::Now() - start) / iterations;
}

// One call of the two-rank all-reduce on the first `bytes` of both buffers.
absl::Status AllReduceOnce(Rank& r, size_t bytes) {
  const bool leader = absl::GetFlag(FLAGS_algorithm) == "leader";
  const size_t half = leader ? 0 : bytes / 2;
  const size_t offset = r.rank == 0 ? 0 : half;
  const size_t mine_bytes = leader ? (r.rank == 0 ? bytes : 0) : (r.rank == 0 ? half : bytes - half);
  auto* own = static_cast<char*>(r.mine.data()) + offset;
  auto* theirs = static_cast<char*>(r.peer.data()) + offset;
  RETURN_IF_ERROR(r.link->Barrier());  // Both inputs are in place.
  if (mine_bytes == 0) return r.link->Barrier();
  device::ReduceArgs args;
  args.dst = own;
  args.srcs = {own, theirs};
  args.count = mine_bytes / sizeof(float);
  RETURN_IF_ERROR(r.stream->Reduce(args));
  RETURN_IF_ERROR(r.stream->Copy(theirs, own, mine_bytes));
  RETURN_IF_ERROR(r.Finish("an all-reduce"));
  return r.link->Barrier();  // Both sums are in both buffers.
}

// Fills the first `bytes` of this rank's buffer with rank + 1, runs one
// all-reduce and checks that every element is 3.
absl::Status CheckAllReduce(Rank& r, size_t bytes) {
  std::vector<float> host(bytes / sizeof(float), static_cast<float>(r.rank + 1));
  RETURN_IF_ERROR(r.stream->Copy(r.mine.data(), host.data(), bytes));
  RETURN_IF_ERROR(r.Finish("filling the buffer"));
  RETURN_IF_ERROR(AllReduceOnce(r, bytes));
  RETURN_IF_ERROR(r.stream->Copy(host.data(), r.mine.data(), bytes));
  RETURN_IF_ERROR(r.Finish("reading the sum back"));
  for (size_t i = 0; i < host.size(); ++i) {
    if (host[i] != 3.0f) {
      return absl::InternalError(absl::StrFormat(
          "rank %d: the all-reduce of %d bytes left %g at element %d, not 1 + 2", r.rank, bytes,
          host[i], i));
    }
  }
  return absl::OkStatus();
}

// Seconds per all-reduce call over `iterations` calls, after the check.
absl::StatusOr<double> TimeAllReduce(Rank& r, size_t bytes, int iterations) {
  RETURN_IF_ERROR(CheckAllReduce(r, bytes));
  for (int i = 0; i < kWarmup; ++i) RETURN_IF_ERROR(AllReduceOnce(r, bytes));
  const absl::Time start = absl::Now();
  for (int i = 0; i < iterations; ++i) RETURN_IF_ERROR(AllReduceOnce(r, bytes));
  return absl::ToDoubleSeconds(absl::Now() - start) / iterations;
}

// Each size: rank 0 times the local and IPC copies while rank 1 waits at a
// barrier, then both run the all-reduce.
absl::Status RunRank(Rank& r, const std::vector<size_t>& sizes, int iterations,
                     results::DeviceIpcResults* out) {
  for (const size_t bytes : sizes) {
    results::DeviceIpcRow row;
    row.set_bytes(static_cast<double>(bytes));
    row.set_iterations(iterations);
    if (r.rank == 0) {
      ASSIGN_OR_RETURN(double local, TimeCopies(r, r.scratch.data(), r.mine.data(), bytes, iterations));
      ASSIGN_OR_RETURN(double write, TimeCopies(r, r.peer.data(), r.scratch.data(), bytes, iterations));
      ASSIGN_OR_RETURN(double read, TimeCopies(r, r.scratch.data(), r.peer.data(), bytes, iterations));
      row.set_local_copy_gbps(bytes / local / 1e9);
      row.set_ipc_write_gbps(bytes / write / 1e9);
      row.set_ipc_read_gbps(bytes / read / 1e9);
    }
    RETURN_IF_ERROR(r.link->Barrier());
    ASSIGN_OR_RETURN(double written, TimeTransportWrites(r, bytes, iterations));
    if (r.rank == 0) row.set_transport_write_gbps(bytes / written / 1e9);
    ASSIGN_OR_RETURN(double allreduce, TimeAllReduce(r, bytes, iterations));
    row.set_allreduce_us(allreduce * 1e6);
    row.set_allreduce_algbw_gbps(bytes / allreduce / 1e9);
    if (row.local_copy_gbps() > 0) {
      // Device bytes moved per second, against the copy's.
      row.set_allreduce_bound_fraction((5.0 * bytes / allreduce) / (2.0 * row.local_copy_gbps() * 1e9));
    }
    if (out != nullptr) {
      *out->add_rows() = row;
      std::printf("%10.0f MiB  local %8.1f  ipc write %8.1f  read %8.1f  transport write %8.1f GB/s"
                  "  all-reduce %10.1f us %8.1f GB/s (%.2f of bound)\n",
                  bytes / 1048576.0, row.local_copy_gbps(), row.ipc_write_gbps(),
                  row.ipc_read_gbps(), row.transport_write_gbps(), row.allreduce_us(),
                  row.allreduce_algbw_gbps(), row.allreduce_bound_fraction());
      std::fflush(stdout);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<size_t>> ParseSizes(const std::string& text) {
  std::vector<size_t> sizes;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    uint32_t mib = 0;
    if (!absl::SimpleAtoi(part, &mib) || mib == 0 || mib > 16384) {
      return absl::InvalidArgumentError(
          absl::StrCat("--mib: '", part, "' is not a size from 1 to 16384 MiB"));
    }
    sizes.push_back(size_t{mib} << 20);
  }
  if (sizes.empty()) return absl::InvalidArgumentError("--mib names no size");
  return sizes;
}

// Starts rank 1 (this binary, with --peer_fd) on one end of a socket pair.
absl::StatusOr<pid_t> StartPeer(int argc, char** argv, int* fd) {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0) {
    return absl::InternalError(absl::StrCat("socketpair: ", strerror(errno)));
  }
  const pid_t child = fork();
  if (child < 0) return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
  if (child == 0) {
    close(pair[0]);
    std::vector<std::string> args(argv, argv + argc);
    args.push_back(absl::StrCat("--peer_fd=", pair[1]));
    std::vector<char*> raw;
    for (std::string& arg : args) raw.push_back(arg.data());
    raw.push_back(nullptr);
    execv("/proc/self/exe", raw.data());
    _exit(127);
  }
  close(pair[1]);
  *fd = pair[0];
  return child;
}

int Main(int argc, char** argv) {
  rdmaflow::ParseProgramFlags(argc, argv,
      "Device memory between two processes on one GPU through IPC: local copy,\n"
      "IPC write and read, and a two-rank in-place all-reduce (docs/device.md).\n"
      "  device_ipc_bench [--device=cuda|fake] [--mib=1,4,16,64,256,1024]\n"
      "                   [--iterations=20] [--algorithm=split|leader] [--json=PATH]");
  const int peer_fd = absl::GetFlag(FLAGS_peer_fd);
  const int rank = peer_fd >= 0 ? 1 : 0;
  auto fail = [rank](const absl::Status& status) {
    std::fprintf(stderr, "device_ipc_bench (rank %d): %s\n", rank, status.ToString().c_str());
    return kExitFailure;
  };
  auto usage_error = [](const absl::Status& status) {
    std::fprintf(stderr, "device_ipc_bench: %s (see device_ipc_bench --help)\n",
                 std::string(status.message()).c_str());
    return kExitUsage;
  };
  absl::StatusOr<std::vector<size_t>> sizes = ParseSizes(absl::GetFlag(FLAGS_mib));
  if (!sizes.ok()) return usage_error(sizes.status());
  const std::string kind = absl::GetFlag(FLAGS_device);
  if (kind != "cuda" && kind != "fake") {
    return usage_error(absl::InvalidArgumentError(
        absl::StrCat("--device=", kind, " is not a device runtime: use cuda or fake")));
  }
  const std::string algorithm = absl::GetFlag(FLAGS_algorithm);
  if (algorithm != "split" && algorithm != "leader") {
    return usage_error(absl::InvalidArgumentError(
        absl::StrCat("--algorithm=", algorithm, ": use split or leader")));
  }
  const int iterations = absl::GetFlag(FLAGS_iterations);
  if (iterations < 1 || iterations > 100) {
    // More would overflow float32: every call doubles the buffers' values.
    return usage_error(absl::InvalidArgumentError("--iterations: from 1 to 100"));
  }
  const size_t max_bytes = *std::max_element(sizes->begin(), sizes->end());
  const absl::Time start = absl::Now();

  int fd = peer_fd;
  pid_t child = -1;
  if (rank == 0) {
    // Rank 1 must not inherit a CUDA context: start it before any.
    absl::StatusOr<pid_t> started = StartPeer(argc, argv, &fd);
    if (!started.ok()) return fail(started.status());
    child = *started;
  }
  absl::StatusOr<Rank> r = SetUp(rank, kind, max_bytes, fd);
  if (!r.ok()) {
    if (child > 0) kill(child, SIGKILL);
    return fail(r.status());
  }
  results::BenchmarkReport report;
  if (rank == 0) {
    std::printf("%s, two processes, all-reduce algorithm %s\n", r->runtime->name().c_str(),
                absl::GetFlag(FLAGS_algorithm).c_str());
  }
  // What a pair of host barriers costs alone: every all-reduce call pays it.
  {
    constexpr int kRounds = 200;
    const absl::Time barriers = absl::Now();
    for (int i = 0; i < 2 * kRounds; ++i) {
      absl::Status crossed = r->link->Barrier();
      if (!crossed.ok()) return fail(crossed);
    }
    if (rank == 0) {
      std::printf("a pair of host barriers: %.1f us\n",
                  absl::ToDoubleMicroseconds(absl::Now() - barriers) / kRounds);
    }
  }
  absl::Status ran = RunRank(*r, *sizes, iterations, rank == 0 ? report.mutable_device_ipc() : nullptr);
  // Each rank closes what it mapped of the other's memory, and neither
  // frees its own before both have: CUDA leaves freeing memory another
  // process still has open undefined.
  if (ran.ok()) {
    r->peer = DeviceMemory();
    ran = r->transport->CloseMappings(absl::Now() + kTimeout);
  }
  if (ran.ok()) ran = r->link->Barrier();
  if (!ran.ok()) {
    if (child > 0) kill(child, SIGKILL);
    return fail(ran);
  }
  if (rank == 1) return 0;
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return fail(absl::InternalError("rank 1 did not end cleanly"));
  }
  report.mutable_device_ipc()->set_device(r->runtime->name());
  *report.mutable_run() = results::NewRunInfo("device_ipc_bench", start);
  report.mutable_run()->set_world_size(2);
  const std::string json = absl::GetFlag(FLAGS_json);
  if (!json.empty()) {
    absl::Status wrote = results::WriteJsonFile(report, json);
    if (!wrote.ok()) return fail(wrote);
  }
  return 0;
}

}  // namespace
}  // namespace rdmaflow::bench

int main(int argc, char** argv) { return rdmaflow::bench::Main(argc, argv); }
