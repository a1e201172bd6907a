// mpi_allreduce: Open MPI's MPI_Allreduce (float32 sum, in place) over the
// sizes allreduce_bench sweeps, reported the same way (allreduce_sweep.h).
// Run it under mpirun:
//   mpirun -np 2 --oversubscribe mpi_allreduce --json=mpi2.json
#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/allreduce_sweep.h"
#include "bench/compute_load.h"
#include "common/program_flags.h"
#include "results/run_info.h"

ABSL_FLAG(int64_t, min_bytes, 4 << 10, "Smallest all-reduce (bytes of float32).");
ABSL_FLAG(int64_t, max_bytes, int64_t{64} << 20, "Largest all-reduce.");
ABSL_FLAG(int64_t, factor, 4, "Size step.");
ABSL_FLAG(int64_t, byte_budget, int64_t{256} << 20,
          "Bytes per size (iterations = budget / size).");
ABSL_FLAG(int32_t, max_iters, 500, "Upper bound on iterations per size.");
ABSL_FLAG(std::string, json, "", "Write the results as JSON to this file (rank 0).");
ABSL_FLAG(int32_t, load, 0,
          "Threads of busy compute running in rank 0's process for the whole run "
          "(0..64), as allreduce_bench --load: how MPI holds up when ranks share "
          "their cores with work.");

int main(int argc, char** argv) {
  rdmaflow::ParseProgramFlags(argc, argv,
      "MPI_Allreduce latency and bus bandwidth (float32 sum, in place).\n"
      "  mpirun -np N mpi_allreduce [--json=out.json]");
  rdmaflow::bench::SweepOptions sweep;
  sweep.min_bytes = absl::GetFlag(FLAGS_min_bytes);
  sweep.max_bytes = absl::GetFlag(FLAGS_max_bytes);
  sweep.factor = absl::GetFlag(FLAGS_factor);
  sweep.byte_budget = absl::GetFlag(FLAGS_byte_budget);
  sweep.max_iters = absl::GetFlag(FLAGS_max_iters);
  if (absl::Status status = rdmaflow::bench::CheckSweepOptions(sweep);
      !status.ok()) {
    std::fprintf(stderr, "mpi_allreduce: %s (see mpi_allreduce --help)\n",
                 std::string(status.message()).c_str());
    return rdmaflow::kExitUsage;
  }
  const int load = absl::GetFlag(FLAGS_load);
  if (load < 0 || load > 64) {
    std::fprintf(stderr, "mpi_allreduce: --load: %d is not a thread count in 0..64\n", load);
    return rdmaflow::kExitUsage;
  }
  MPI_Init(&argc, &argv);
  const absl::Time start = absl::Now();
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  rdmaflow::bench::ComputeLoad compute(rank == 0 ? load : 0);
  std::vector<rdmaflow::bench::AllReduceRow> rows;
  std::vector<float> data(sweep.max_bytes / sizeof(float));
  int failed = 0;
  for (int64_t bytes : rdmaflow::bench::SweepSizes(sweep)) {
    const int count = static_cast<int>(bytes / sizeof(float));
    // Check the sum once, then time on zeros.
    std::fill(data.begin(), data.begin() + count, static_cast<float>(rank + 1));
    MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (data[count - 1] != world * (world + 1) / 2.0f) failed = 1;
    std::fill(data.begin(), data.begin() + count, 0.0f);
    const int iterations = rdmaflow::bench::Iterations(sweep, bytes);
    MPI_Barrier(MPI_COMM_WORLD);
    double us = 0;
    const double load_rate = rdmaflow::bench::LoadRate(&compute, [&] {
      us = rdmaflow::bench::TimeCalls(2, iterations, [&] {
        MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      });
    });
    rows.push_back(rdmaflow::bench::MakeRow("mpi", world, bytes, iterations, us));
    rows.back().set_load_iterations_per_s(load_rate);
    if (rank == 0) {
      std::fprintf(stderr, "  %d ranks %10lld bytes mpi      %10.1f us %8.3f GB/s bus\n",
                   world, static_cast<long long>(bytes), us, rows.back().busbw_gbps());
    }
  }
  if (rank == 0) {
    if (failed) std::fprintf(stderr, "mpi_allreduce: a sum was wrong\n");
    rdmaflow::bench::PrintRows(rows);
    const std::string path = absl::GetFlag(FLAGS_json);
    if (!path.empty()) {
      rdmaflow::results::RunInfo run =
          rdmaflow::results::NewRunInfo("mpi_allreduce", start);
      run.set_description(absl::StrCat("Open MPI MPI_Allreduce; compute load ", load,
                                       " threads"));
      run.set_world_size(world);
      const absl::Status written =
          rdmaflow::bench::WriteRowsJson(path, run, 0, 0, rows);
      if (!written.ok()) {
        std::fprintf(stderr, "%s\n", written.ToString().c_str());
        failed = 1;
      }
    }
  }
  compute.Stop();
  MPI_Finalize();
  return failed;
}
