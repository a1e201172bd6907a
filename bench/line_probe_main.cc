// File: line_probe_main.cc
// line_round_trip: the cache-line round trip between two CPUs
// (bench/line_probe.h), once or every --interval_ms, a line each: the UTC
// time, the CPUs and the nanoseconds, and with --copy_sizes the time of a
// copy the other CPU then reads, plain and streamed. Benchmarks on a VM record it beside their figures: where it
// changes, the hypervisor moved the CPUs, and so did every figure that
// moves data between processes.
#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/line_probe.h"
#include "common/program_flags.h"

ABSL_FLAG(std::string, cpus, "", "The two CPUs, as A,B; empty: the first two this process may run on.");
ABSL_FLAG(int, repeat, 1, "Probes to take, --interval_ms apart.");
ABSL_FLAG(int, interval_ms, 1000, "Between probes.");
ABSL_FLAG(int, batches, 5, "Batches per probe; a probe reports the median batch.");
ABSL_FLAG(int, round_trips, 4000, "Round trips per batch.");
ABSL_FLAG(std::string, copy_sizes, "",
          "Also time, at each of these sizes (bytes, comma-separated), a copy into memory the "
          "other CPU then reads, plain and with streaming stores (common/peer_copy.h): two "
          "more columns per size, microseconds a round.");
ABSL_FLAG(int, copy_rounds, 200, "Rounds per copy timing.");
ABSL_FLAG(double, timeout_s, 10,
          "How long one probe may take (a copy timing: at least 1 s per 100 MB it moves) "
          "before it fails, the CPUs being busy with something else.");

int main(int argc, char** argv) {
  rdmaflow::ParseProgramFlags(
      argc, argv,
      "The cache-line round trip between two CPUs, in nanoseconds: where it changes, the "
      "machine placed them differently (docs/benchmarks.md).\n"
      "  line_round_trip [--cpus=0,1] [--repeat=1] [--interval_ms=1000] "
      "[--copy_sizes=65536,1048576]");
  rdmaflow::bench::LineProbeOptions options;
  options.batches = absl::GetFlag(FLAGS_batches);
  options.round_trips = absl::GetFlag(FLAGS_round_trips);
  if (const std::string cpus = absl::GetFlag(FLAGS_cpus); !cpus.empty()) {
    const std::vector<std::string> parts = absl::StrSplit(cpus, ',');
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &options.cpu_a) ||
        !absl::SimpleAtoi(parts[1], &options.cpu_b) || options.cpu_a < 0 || options.cpu_b < 0 ||
        options.cpu_a == options.cpu_b) {
      std::fprintf(stderr, "--cpus='%s' must be two different CPU numbers, A,B\n",
                   cpus.c_str());
      return 2;
    }
  }
  std::vector<size_t> copy_sizes;
  if (const std::string sizes = absl::GetFlag(FLAGS_copy_sizes); !sizes.empty()) {
    for (absl::string_view part : absl::StrSplit(sizes, ',')) {
      size_t bytes = 0;
      // From 128 bytes: a shorter copy never streams (common/peer_copy.h).
      if (!absl::SimpleAtoi(part, &bytes) || bytes < 128 || bytes % 8 != 0 ||
          bytes > (size_t{1} << 30)) {
        std::fprintf(stderr,
                     "--copy_sizes: '%s' is not a size in bytes, a multiple of 8 from 128 to "
                     "1073741824\n",
                     std::string(part).c_str());
        return 2;
      }
      copy_sizes.push_back(bytes);
    }
  }
  const int copy_rounds = absl::GetFlag(FLAGS_copy_rounds);
  const double timeout_s = absl::GetFlag(FLAGS_timeout_s);
  if (copy_rounds < 1 || !(timeout_s > 0) || timeout_s > 86400) {
    std::fprintf(stderr, "--copy_rounds must be >= 1 and --timeout_s from 0 to 86400\n");
    return 2;
  }
  options.timeout = absl::Seconds(timeout_s);
  const int repeat = absl::GetFlag(FLAGS_repeat);
  const int interval_ms = absl::GetFlag(FLAGS_interval_ms);
  if (repeat < 1 || interval_ms < 0) {
    std::fprintf(stderr, "--repeat must be >= 1 and --interval_ms >= 0\n");
    return 2;
  }
  std::string header = "time\tcpu_a\tcpu_b\tround_trip_ns";
  for (size_t bytes : copy_sizes) {
    header += "\tplain_us_" + std::to_string(bytes) + "\tstreamed_us_" + std::to_string(bytes);
  }
  std::printf("%s\n", header.c_str());
  for (int i = 0; i < repeat; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
    absl::StatusOr<rdmaflow::bench::LineRoundTrip> probe =
        rdmaflow::bench::ProbeLineRoundTrip(options);
    if (!probe.ok()) {
      std::fprintf(stderr, "line_round_trip: %s\n", probe.status().ToString().c_str());
      return 1;
    }
    std::string copies;
    for (size_t bytes : copy_sizes) {
      for (size_t streaming_min : {size_t{0}, bytes}) {
        rdmaflow::bench::LineProbeOptions copy_options = options;
        copy_options.timeout = std::max(
            options.timeout,
            absl::Seconds(static_cast<double>(bytes) * (copy_rounds + 1) / 1e8));
        absl::StatusOr<rdmaflow::bench::CopyRound> round =
            rdmaflow::bench::ProbeCopyRound(copy_options, bytes, streaming_min, copy_rounds);
        if (!round.ok()) {
          std::fprintf(stderr, "line_round_trip: %s\n", round.status().ToString().c_str());
          return 1;
        }
        copies += absl::StrFormat("\t%.1f", round->round_us);
      }
    }
    std::printf("%s\t%d\t%d\t%.0f%s\n",
                absl::FormatTime("%H:%M:%S", absl::Now(), absl::UTCTimeZone()).c_str(),
                probe->cpu_a, probe->cpu_b, probe->round_trip_ns, copies.c_str());
    std::fflush(stdout);
  }
  return 0;
}
