// File: version.h
// -----------------------------------------------------------------------------
// rdmaflow's version, from its one source: bazel/version.bzl (RDMAFLOW_VERSION),
// the same string //:install, the wheel and rdmaflow_torch.__version__ carry.
#ifndef RDMAFLOW_COMMON_VERSION_H_
#define RDMAFLOW_COMMON_VERSION_H_

#include "absl/strings/string_view.h"

namespace rdmaflow {

// "0.1.0" (semantic versioning; CHANGELOG.md lists what each one changed).
absl::string_view Version();

}  // namespace rdmaflow

#endif  // RDMAFLOW_COMMON_VERSION_H_
