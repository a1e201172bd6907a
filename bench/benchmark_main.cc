// File: benchmark_main.cc
// -----------------------------------------------------------------------------
// main() of the Google Benchmark programs, in place of BENCHMARK_MAIN(), so
// that they keep rdmaflow's command-line convention (common/program_flags.h):
// --version prints the version, --help exits 0, and a flag Google Benchmark
// does not know is a usage error (exit 2) instead of a failure (exit 1).
#include <cstring>
#include <iostream>
#include <string>

#include "benchmark/benchmark.h"
#include "common/program_flags.h"
#include "common/version.h"

int main(int argc, char** argv) {
  std::string program = argc > 0 ? argv[0] : "benchmark";
  program = program.substr(program.rfind('/') + 1);
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--version") == 0) {
      std::cout << program << " " << rdmaflow::Version() << "\n";
      return rdmaflow::kExitOk;
    }
  }
  benchmark::Initialize(&argc, argv);  // Answers --help itself (exit 0).
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
    std::cerr << program << ": flags are Google Benchmark's --benchmark_* "
              << "(see " << program << " --help)\n";
    return rdmaflow::kExitUsage;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return rdmaflow::kExitOk;
}
