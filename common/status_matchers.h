// File: status_matchers.h
// -----------------------------------------------------------------------------
// gmock matchers for absl::Status and absl::StatusOr<T>, which Debian's Abseil
// 20220623 does not ship:
//
//   EXPECT_THAT(transport.Allocate(0), StatusIs(absl::StatusCode::kInvalidArgument));
//   EXPECT_THAT(endpoint->Flush(deadline), IsOk());
//   ASSERT_OK_AND_ASSIGN(auto region, transport->Allocate(64));
#ifndef RDMAFLOW_COMMON_STATUS_MATCHERS_H_
#define RDMAFLOW_COMMON_STATUS_MATCHERS_H_

#include <ostream>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::testing {
namespace internal {

inline const absl::Status& GetStatus(const absl::Status& status) {
  return status;
}
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

}  // namespace internal

// Matches an OK Status or StatusOr.
MATCHER(IsOk, "is OK") {
  const absl::Status& status = internal::GetStatus(arg);
  if (!status.ok()) *result_listener << "status: " << status;
  return status.ok();
}

// Matches a Status or StatusOr with the given code.
MATCHER_P(StatusIs, code,
          std::string("has status code ") +
              absl::StatusCodeToString(static_cast<absl::StatusCode>(code))) {
  const absl::Status& status = internal::GetStatus(arg);
  *result_listener << "status: " << status;
  return status.code() == code;
}

// Matches a Status or StatusOr with the given code whose message matches
// `message_matcher` (e.g. HasSubstr("rank 1")).
MATCHER_P2(StatusIs, code, message_matcher,
           std::string("has status code ") +
               absl::StatusCodeToString(static_cast<absl::StatusCode>(code))) {
  const absl::Status& status = internal::GetStatus(arg);
  *result_listener << "status: " << status;
  return status.code() == code &&
         ::testing::ExplainMatchResult(message_matcher,
                                       std::string(status.message()),
                                       result_listener);
}

// Matches an OK StatusOr whose value matches `value_matcher`.
MATCHER_P(IsOkAndHolds, value_matcher, "is OK and holds a matching value") {
  if (!arg.ok()) {
    *result_listener << "status: " << arg.status();
    return false;
  }
  return ::testing::ExplainMatchResult(value_matcher, *arg, result_listener);
}

}  // namespace rdmaflow::testing

#define RDMAFLOW_TEST_CONCAT_INNER_(a, b) a##b
#define RDMAFLOW_TEST_CONCAT_(a, b) RDMAFLOW_TEST_CONCAT_INNER_(a, b)

#define ASSERT_OK(expr) ASSERT_THAT((expr), ::rdmaflow::testing::IsOk())
#define EXPECT_OK(expr) EXPECT_THAT((expr), ::rdmaflow::testing::IsOk())

#define RDMAFLOW_ASSERT_OK_AND_ASSIGN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                        \
  ASSERT_TRUE(statusor.ok()) << statusor.status();                \
  lhs = std::move(statusor).value()

#define ASSERT_OK_AND_ASSIGN(lhs, rexpr)                                    \
  RDMAFLOW_ASSERT_OK_AND_ASSIGN_IMPL_(                                      \
      RDMAFLOW_TEST_CONCAT_(rdmaflow_statusor_, __LINE__), lhs, rexpr)

#endif  // RDMAFLOW_COMMON_STATUS_MATCHERS_H_
