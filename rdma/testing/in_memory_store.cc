#include "rdma/testing/in_memory_store.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rdmaflow::rdma::testing {

absl::Status InMemoryStore::Set(absl::string_view key,
                                absl::string_view value) {
  absl::MutexLock lock(&mu_);
  values_[key] = std::string(value);
  return absl::OkStatus();
}

absl::StatusOr<std::string> InMemoryStore::Get(absl::string_view key,
                                               absl::Duration timeout) {
  absl::Status status = Wait({std::string(key)}, timeout);
  if (!status.ok()) return status;
  absl::MutexLock lock(&mu_);
  return values_.at(key);
}

absl::Status InMemoryStore::Wait(const std::vector<std::string>& keys,
                                 absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto all_set = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const std::string& key : keys) {
      if (!values_.contains(key)) return false;
    }
    return true;
  };
  if (mu_.AwaitWithTimeout(absl::Condition(&all_set), timeout)) {
    return absl::OkStatus();
  }
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    if (!values_.contains(key)) missing.push_back(key);
  }
  return absl::DeadlineExceededError(
      absl::StrCat("store keys not set after ", absl::FormatDuration(timeout),
                   ": ", absl::StrJoin(missing, ", ")));
}

absl::StatusOr<int64_t> InMemoryStore::Add(absl::string_view key,
                                           int64_t delta) {
  absl::MutexLock lock(&mu_);
  int64_t value = 0;
  auto it = values_.find(key);
  if (it != values_.end() && !absl::SimpleAtoi(it->second, &value)) {
    return absl::FailedPreconditionError(
        absl::StrCat("store key '", key, "' does not hold an integer"));
  }
  value += delta;
  values_[key] = absl::StrCat(value);
  return value;
}

}  // namespace rdmaflow::rdma::testing
