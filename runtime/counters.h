// File: counters.h
// -----------------------------------------------------------------------------
// TransferCounters: what a Communicator moved and what it cost, cumulative
// since it was created. Reported by the ablation tool and the training
// harness; `copies` is the figure that separates zero-copy from RPC.
#ifndef RDMAFLOW_RUNTIME_COUNTERS_H_
#define RDMAFLOW_RUNTIME_COUNTERS_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace rdmaflow::runtime {

// Value type.
struct TransferCounters {
  int64_t steps = 0;
  int64_t tensors_sent = 0;
  int64_t tensors_received = 0;
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  // Whole-tensor memory copies the communicator made (staging a tensor that
  // was not in registered memory, serializing, deserializing), and their
  // bytes. 0 on the zero-copy path when tensors come from the registered
  // allocator.
  int64_t copies = 0;
  int64_t bytes_copied = 0;
  // Dynamic tensors pulled with a one-sided read.
  int64_t reads = 0;
  // Bytes this rank pulled with one-sided reads (e.g. parameter pulls).
  int64_t bytes_read = 0;
  // Time spent waiting: in Send for a slot the receiver still held, in Recv
  // for the tensor to arrive.
  absl::Duration send_wait;
  absl::Duration recv_wait;
};

// "sent 12 tensors (4.0 MiB), received ..., copies 0 (0 B), waits ...".
std::string FormatCounters(const TransferCounters& counters);

}  // namespace rdmaflow::runtime

#endif  // RDMAFLOW_RUNTIME_COUNTERS_H_
