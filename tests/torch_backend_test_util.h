// File: torch_backend_test_util.h
// -----------------------------------------------------------------------------
// What the c10d backend's multi-process tests share: a Work's wait() as a
// Status, a check as a Status, inputs whose reductions are exact, and a
// start-up barrier.
#ifndef RDMAFLOW_TESTS_TORCH_BACKEND_TEST_UTIL_H_
#define RDMAFLOW_TESTS_TORCH_BACKEND_TEST_UTIL_H_

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

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

// Returns once every rank of `world` called it (within 60 s): a group's
// timeout (a few seconds in the slow-peer cases) then bounds the group's own
// set-up, not how far apart the processes started on a loaded machine.
inline absl::Status AllRanksUp(c10d::Store& store, int rank, int world) {
  try {
    store.set(absl::StrCat("test/up/", rank), std::vector<uint8_t>{1});
    std::vector<std::string> keys;
    for (int r = 0; r < world; ++r) keys.push_back(absl::StrCat("test/up/", r));
    store.wait(keys, std::chrono::seconds(60));
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("the test's store, at start: ", e.what()));
  }
}

}  // namespace rdmaflow::testing

#endif  // RDMAFLOW_TESTS_TORCH_BACKEND_TEST_UTIL_H_
