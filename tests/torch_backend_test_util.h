// File: torch_backend_test_util.h
// -----------------------------------------------------------------------------
// What the c10d backend's multi-process tests share: a Work's wait() as a
// Status, a check as a Status, and inputs whose reductions are exact.
#ifndef RDMAFLOW_TESTS_TORCH_BACKEND_TEST_UTIL_H_
#define RDMAFLOW_TESTS_TORCH_BACKEND_TEST_UTIL_H_

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <exception>
#include <string>

#include "absl/status/status.h"

namespace rdmaflow::testing {

// wait() as a Status: c10d raises an operation's error (kAborted here).
inline absl::Status Wait(const c10::intrusive_ptr<c10d::Work>& work) {
  try {
    work->wait();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::AbortedError(e.what());
  }
}

// OK when `ok`, else kDataLoss saying `what`.
inline absl::Status Check(bool ok, const std::string& what) {
  return ok ? absl::OkStatus() : absl::DataLossError(what);
}

// Small integers: sums, products and extremes are exact in every dtype, in
// any order.
inline at::Tensor Values(int rank, int64_t n, at::ScalarType dtype, int salt = 0) {
  at::Tensor i = at::arange(n, at::kLong);
  return ((i * 7 + rank * 13 + salt * 5) % 31 - 15).to(dtype);
}

}  // namespace rdmaflow::testing

#endif  // RDMAFLOW_TESTS_TORCH_BACKEND_TEST_UTIL_H_
