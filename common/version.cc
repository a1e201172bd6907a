// File: version.cc
#include "common/version.h"

#ifndef RDMAFLOW_VERSION
#error "RDMAFLOW_VERSION comes from bazel/version.bzl through common/BUILD.bazel"
#endif

namespace rdmaflow {

absl::string_view Version() { return RDMAFLOW_VERSION; }

}  // namespace rdmaflow
