// File: counters.cc
#include "runtime/counters.h"

#include "absl/strings/str_cat.h"
#include "common/text_table.h"

namespace rdmaflow::runtime {

std::string FormatCounters(const TransferCounters& c) {
  return absl::StrCat(
      c.steps, " steps; sent ", c.tensors_sent, " tensors (",
      FormatBytes(c.bytes_sent), "), received ", c.tensors_received, " (",
      FormatBytes(c.bytes_received), "), ", c.reads, " pulled by read (",
      FormatBytes(c.bytes_read), "); copies ",
      c.copies, " (", FormatBytes(c.bytes_copied), "); waited ",
      absl::FormatDuration(c.send_wait), " in Send, ",
      absl::FormatDuration(c.recv_wait), " in Recv");
}

}  // namespace rdmaflow::runtime
