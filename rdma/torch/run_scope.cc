#include "rdma/torch/run_scope.h"

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace rdmaflow::rdma::torch {
namespace {

constexpr size_t kMaxRunId = 128;
constexpr int64_t kMaxAttempt = 1000000;

bool ValidRunId(const std::string& id) {
  if (id.empty() || id.size() > kMaxRunId) return false;
  for (char c : id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' &&
        c != '-') {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string RunScope::prefix() const {
  return absl::StrCat("run/", run_id, "/attempt/", attempt);
}

absl::StatusOr<RunScope> RunScope::FromEnvironment() {
  RunScope scope;
  for (const char* name : {"RDMAFLOW_RUN_ID", "TORCHELASTIC_RUN_ID"}) {
    const char* value = std::getenv(name);
    if (value == nullptr) continue;
    if (!ValidRunId(value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, "='", absl::CHexEscape(value), "' is not a run id: use 1 to ", kMaxRunId,
          " of the characters A-Z a-z 0-9 . _ -"));
    }
    scope.run_id = value;
    break;
  }
  if (const char* count = std::getenv("TORCHELASTIC_RESTART_COUNT"); count != nullptr) {
    if (!absl::SimpleAtoi(count, &scope.attempt) || scope.attempt < 0 ||
        scope.attempt > kMaxAttempt) {
      return absl::InvalidArgumentError(
          absl::StrCat("TORCHELASTIC_RESTART_COUNT='", absl::CHexEscape(count),
                       "' is not an integer in 0..", kMaxAttempt));
    }
  }
  return scope;
}

}  // namespace rdmaflow::rdma::torch
