// File: annotate.h
// -----------------------------------------------------------------------------
// Annotate: the same status with "where: " in front of its message, so an
// error that crosses a layer says which object it came from ("all-reduce
// 'c10d' on rank 3: rank 1 never joined: ..."). The code is kept: callers
// above still branch on it. OK stays OK.
//
//   if (!status.ok()) return Annotate(status, Where());
#ifndef RDMAFLOW_COMMON_ANNOTATE_H_
#define RDMAFLOW_COMMON_ANNOTATE_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace rdmaflow {

inline absl::Status Annotate(const absl::Status& status, absl::string_view where) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(where, ": ", status.message()));
}

}  // namespace rdmaflow

#endif  // RDMAFLOW_COMMON_ANNOTATE_H_
