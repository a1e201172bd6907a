// File: status_macros.h
// -----------------------------------------------------------------------------
// RDMAFLOW_RETURN_IF_ERROR and RDMAFLOW_ASSIGN_OR_RETURN, which Debian's Abseil
// 20220623 does not ship. Short aliases RETURN_IF_ERROR / ASSIGN_OR_RETURN are
// provided for readability inside the project.
//
//   RETURN_IF_ERROR(DoThing());   // a Status, or a StatusOr whose value is unused
//   ASSIGN_OR_RETURN(MemoryRegion region, transport.Allocate(4096));
#ifndef RDMAFLOW_COMMON_STATUS_MACROS_H_
#define RDMAFLOW_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rdmaflow::status_internal {
inline ::absl::Status AsStatus(::absl::Status status) { return status; }
template <typename T>
::absl::Status AsStatus(const ::absl::StatusOr<T>& status_or) {
  return status_or.status();
}
}  // namespace rdmaflow::status_internal

#define RDMAFLOW_RETURN_IF_ERROR(expr)                                      \
  do {                                                                      \
    ::absl::Status rdmaflow_status_ =                                       \
        ::rdmaflow::status_internal::AsStatus(expr);                        \
    if (!rdmaflow_status_.ok()) return rdmaflow_status_;                    \
  } while (false)

#define RDMAFLOW_STATUS_CONCAT_INNER_(a, b) a##b
#define RDMAFLOW_STATUS_CONCAT_(a, b) RDMAFLOW_STATUS_CONCAT_INNER_(a, b)

#define RDMAFLOW_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                    \
  if (!statusor.ok()) return std::move(statusor).status();    \
  lhs = std::move(statusor).value()

#define RDMAFLOW_ASSIGN_OR_RETURN(lhs, rexpr) \
  RDMAFLOW_ASSIGN_OR_RETURN_IMPL_(            \
      RDMAFLOW_STATUS_CONCAT_(rdmaflow_statusor_, __LINE__), lhs, rexpr)

#ifndef RETURN_IF_ERROR
#define RETURN_IF_ERROR(expr) RDMAFLOW_RETURN_IF_ERROR(expr)
#endif
#ifndef ASSIGN_OR_RETURN
#define ASSIGN_OR_RETURN(lhs, rexpr) RDMAFLOW_ASSIGN_OR_RETURN(lhs, rexpr)
#endif

#endif  // RDMAFLOW_COMMON_STATUS_MACROS_H_
