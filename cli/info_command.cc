// File: info_command.cc
#include "cli/info_command.h"

#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/args.h"
#include "common/program_flags.h"
#include "common/version.h"
#include "device/gpu_probe.h"
#include "rdma/builtin_transports.h"
#include "rdma/transport_registry.h"

#ifndef RDMAFLOW_TORCH_VERSION
#error "RDMAFLOW_TORCH_VERSION comes from @rdmaflow_torch through cli/BUILD.bazel"
#endif

namespace rdmaflow::cli {
namespace {

// Below this, a job's registered memory (the plan's slots, the backend's
// 32 MiB stage and 64 MiB pool) does not fit.
constexpr uint64_t kEnoughMemlock = uint64_t{256} << 20;

std::optional<uint64_t> MemlockLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
    return std::nullopt;
  }
  return static_cast<uint64_t>(limit.rlim_cur);
}

std::string Bytes(uint64_t bytes) {
  if (bytes >= (uint64_t{1} << 30) && bytes % (uint64_t{1} << 30) == 0) {
    return absl::StrCat(bytes >> 30, " GiB");
  }
  if (bytes >= (uint64_t{1} << 20)) return absl::StrCat(bytes >> 20, " MiB");
  return absl::StrCat(bytes >> 10, " KiB");
}

void PrintList(std::ostream& out, const std::vector<std::string>& lines,
               const char* prefix) {
  for (const std::string& line : lines) out << prefix << line << "\n";
}

}  // namespace

std::string MemlockAdvice(std::optional<uint64_t> bytes) {
  if (!bytes.has_value() || *bytes >= kEnoughMemlock) return "";
  return absl::StrCat(
      "the memlock limit (", Bytes(*bytes), ") caps registered memory for "
      "ibverbs and UCX's RDMA transports: raise it to unlimited (`ulimit -l "
      "unlimited`, `memlock` in /etc/security/limits.conf, `--ulimit "
      "memlock=-1` for docker); shared memory and tcp do not need it");
}

std::string InfoUsage() {
  return R"(usage: rdmaflow info

Prints what this machine offers rdmaflow, as ucx_info and ibv_devinfo do:
the version and the PyTorch rdmaflow_torch is built for, the memlock limit,
each transport (UCX's transports and devices, same-host direct access, RDMA
devices with the port and GID the ibverbs transport would choose, the
in-process loopback), and the GPUs the CUDA driver shows. Each missing piece
gets a line of advice. It opens devices but connects to nothing.

options:
  -h, --help   this text
  --version    the version

exit status: 0 printed (whatever is missing); 2 usage error.
)";
}

int RunInfoCommand(const std::vector<std::string>& args, std::ostream& out,
                   std::ostream& err) {
  absl::StatusOr<ParsedArgs> parsed = ParseArgs(args, {});
  if (!parsed.ok()) {
    err << "rdmaflow info: " << parsed.status().message() << "\n";
    return kExitUsage;
  }
  if (parsed->help) {
    out << InfoUsage();
    return kExitOk;
  }
  if (!parsed->positional.empty()) {
    err << "rdmaflow info: takes no arguments (see rdmaflow info --help)\n";
    return kExitUsage;
  }
  std::vector<std::string> advice;
#ifdef __clang__
  constexpr char kCompiler[] = "clang ";
#else
  constexpr char kCompiler[] = "g++ ";
#endif
  out << "rdmaflow " << Version() << " (rdmaflow_torch for PyTorch "
      << RDMAFLOW_TORCH_VERSION << ", built with " << kCompiler << __VERSION__
      << ")\n";
  utsname system{};
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  if (uname(&system) == 0) {
    out << "machine: " << host << ", " << system.sysname << " "
        << system.release << " " << system.machine << ", "
        << std::thread::hardware_concurrency() << " cores\n";
  }
  const std::optional<uint64_t> memlock = MemlockLimit();
  out << "memlock limit: " << (memlock ? Bytes(*memlock) : "unlimited") << "\n";
  if (std::string line = MemlockAdvice(memlock); !line.empty()) {
    advice.push_back(line);
  }

  out << "\ntransports (RDMAFLOW_TRANSPORT, --transport):\n";
  rdma::TransportRegistry registry;
  if (absl::Status status = rdma::RegisterBuiltinTransports(registry);
      !status.ok()) {
    err << "rdmaflow info: " << status.message() << "\n";
    return kExitFailure;
  }
  for (const std::string& name : registry.Names()) {
    absl::StatusOr<rdma::TransportProbeReport> report = registry.Probe(name);
    if (!report.ok()) continue;
    out << "  " << name << ": " << (report->usable ? "usable" : "NOT usable")
        << "\n";
    PrintList(out, report->found, "    ");
    for (const std::string& line : report->advice) {
      advice.push_back(absl::StrCat(name, ": ", line));
    }
  }

  out << "\nGPUs (device memory, rdma/device):\n";
  absl::StatusOr<device::GpuReport> gpus = device::ProbeGpus();
  if (!gpus.ok() || gpus->gpus.empty()) {
    out << "  none: "
        << (gpus.ok() ? "the CUDA driver shows no device" : gpus.status().message())
        << "\n";
    const bool no_driver =
        !gpus.ok() && absl::StartsWith(gpus.status().message(), "no CUDA driver");
    advice.push_back(absl::StrCat(
        "GPU: none answers, so device regions use the fake device only (tests); ",
        no_driver ? "with a GPU, install the NVIDIA driver (nvidia-smi should list it)"
                  : "the driver is there: check nvidia-smi and CUDA_VISIBLE_DEVICES"));
  } else {
    out << "  CUDA driver " << gpus->driver_version / 1000 << "."
        << gpus->driver_version % 1000 / 10 << "\n";
    for (const device::GpuInfo& gpu : gpus->gpus) {
      out << "  cuda:" << gpu.index << " " << gpu.name << ", sm_" << gpu.major
          << gpu.minor << ", " << Bytes(gpu.memory_bytes) << "\n";
    }
  }

  out << "\nadvice:\n";
  if (advice.empty()) out << "  none: everything rdmaflow can use is here\n";
  PrintList(out, advice, "  - ");
  return kExitOk;
}

}  // namespace rdmaflow::cli
