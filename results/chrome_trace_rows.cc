// File: chrome_trace_rows.cc
#include "results/chrome_trace_rows.h"

namespace rdmaflow::results {

TraceEvent RowName(int pid, int tid, const std::string& name) {
  TraceEvent event;
  event.set_ph("M");
  event.set_name(tid < 0 ? "process_name" : "thread_name");
  event.set_pid(pid);
  if (tid >= 0) event.set_tid(tid);
  event.mutable_args()->set_name(name);
  return event;
}

}  // namespace rdmaflow::results
