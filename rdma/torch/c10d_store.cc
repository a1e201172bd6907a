#include "rdma/torch/c10d_store.h"

#include <chrono>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rdmaflow::rdma::torch {
namespace {

// c10d reports timeouts and I/O errors as exceptions; this is the one place
// they become Status.
template <typename Fn>
auto Guard(Fn fn, const std::string& what, absl::StatusCode code)
    -> absl::StatusOr<decltype(fn())> {
  try {
    return fn();
  } catch (const c10::Error& e) {
    return absl::Status(code,
                        absl::StrCat(what, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::Status(code, absl::StrCat(what, ": ", e.what()));
  }
}

}  // namespace

C10dStore::C10dStore(c10::intrusive_ptr<c10d::Store> store, std::string where)
    : store_(std::move(store)), where_(std::move(where)) {}

absl::Status C10dStore::Set(absl::string_view key, absl::string_view value) {
  return Guard(
             [&] {
               store_->set(std::string(key),
                           std::vector<uint8_t>(value.begin(), value.end()));
               return 0;
             },
             absl::StrCat("store set of '", key, "' at ", where_),
             absl::StatusCode::kUnavailable)
      .status();
}

absl::StatusOr<std::string> C10dStore::Get(absl::string_view key,
                                           absl::Duration timeout) {
  if (absl::Status status = Wait({std::string(key)}, timeout); !status.ok()) {
    return status;
  }
  return Guard(
      [&] {
        std::vector<uint8_t> value = store_->get(std::string(key));
        return std::string(value.begin(), value.end());
      },
      absl::StrCat("store get of '", key, "' at ", where_),
      absl::StatusCode::kUnavailable);
}

absl::Status C10dStore::Wait(const std::vector<std::string>& keys,
                             absl::Duration timeout) {
  return Guard(
             [&] {
               store_->wait(keys, std::chrono::milliseconds(
                                      absl::ToInt64Milliseconds(timeout)));
               return 0;
             },
             absl::StrCat("waiting ", absl::FormatDuration(timeout),
                          " for store keys [", absl::StrJoin(keys, ", "),
                          "] at ", where_),
             absl::StatusCode::kDeadlineExceeded)
      .status();
}

absl::StatusOr<int64_t> C10dStore::Add(absl::string_view key, int64_t delta) {
  return Guard([&] { return store_->add(std::string(key), delta); },
               absl::StrCat("store add to '", key, "' at ", where_),
               absl::StatusCode::kUnavailable);
}

}  // namespace rdmaflow::rdma::torch
