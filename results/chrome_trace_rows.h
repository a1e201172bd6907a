// File: chrome_trace_rows.h
// -----------------------------------------------------------------------------
// The metadata events of a Chrome trace (chrome_trace.proto) that name its
// rows: a process (a rank) and its threads (lanes). For the writers of
// traces (runtime/trace_recorder.h, the trainer's step timeline).
#ifndef RDMAFLOW_RESULTS_CHROME_TRACE_ROWS_H_
#define RDMAFLOW_RESULTS_CHROME_TRACE_ROWS_H_

#include <string>

#include "results/chrome_trace.pb.h"

namespace rdmaflow::results {

// An "M" event naming process `pid` (tid < 0) or its thread `tid`.
TraceEvent RowName(int pid, int tid, const std::string& name);

}  // namespace rdmaflow::results

#endif  // RDMAFLOW_RESULTS_CHROME_TRACE_ROWS_H_
