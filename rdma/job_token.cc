// File: job_token.cc
#include "rdma/job_token.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstdlib>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace rdmaflow::rdma {
namespace {

// A set, non-empty variable; an empty one counts as unset.
std::optional<std::string> NonEmpty(
    absl::FunctionRef<std::optional<std::string>(absl::string_view)> get,
    absl::string_view name) {
  std::optional<std::string> value = get(name);
  if (value.has_value() && value->empty()) return std::nullopt;
  return value;
}

}  // namespace

absl::StatusOr<JobToken> JobTokenFrom(
    absl::FunctionRef<std::optional<std::string>(absl::string_view)> get) {
  if (std::optional<std::string> token = get("RDMAFLOW_JOB_TOKEN")) {
    if (token->empty()) {
      return absl::InvalidArgumentError(
          "RDMAFLOW_JOB_TOKEN is set but empty: unset it, or give every rank "
          "of the job the same secret (e.g. from `openssl rand -hex 16`)");
    }
    if (token->size() > kMaxJobTokenBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "RDMAFLOW_JOB_TOKEN has ", token->size(), " bytes, more than the ",
          kMaxJobTokenBytes, " a handshake carries; use a shorter secret"));
    }
    return JobToken{*std::move(token), "RDMAFLOW_JOB_TOKEN"};
  }
  const std::optional<std::string> run_id = NonEmpty(get, "TORCHELASTIC_RUN_ID");
  const std::optional<std::string> addr = NonEmpty(get, "MASTER_ADDR");
  const std::optional<std::string> port = NonEmpty(get, "MASTER_PORT");
  if (!run_id && !addr && !port) {
    return JobToken{
        kDefaultJobToken,
        "the default (no RDMAFLOW_JOB_TOKEN, TORCHELASTIC_RUN_ID, MASTER_ADDR "
        "or MASTER_PORT is set)"};
  }
  // Length-prefixed fields: ("a|b", "c") and ("a", "b|c") give different
  // tokens.
  std::string value = "rdmaflow-job-v1";
  std::string source = "derived from";
  for (const auto& [name, field] :
       {std::pair<const char*, const std::optional<std::string>*>{
            "TORCHELASTIC_RUN_ID", &run_id},
        {"MASTER_ADDR", &addr},
        {"MASTER_PORT", &port}}) {
    const std::string text = field->value_or("");
    absl::StrAppend(&value, "|", name, "=", text.size(), ":", text);
    if (field->has_value()) absl::StrAppend(&source, " ", name);
  }
  absl::StrAppend(&source, " (not a secret: set RDMAFLOW_JOB_TOKEN to keep "
                           "out anyone who can reach the ports)");
  if (value.size() > kMaxJobTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the job token derived from TORCHELASTIC_RUN_ID, MASTER_ADDR and "
        "MASTER_PORT has ", value.size(), " bytes, more than ",
        kMaxJobTokenBytes, "; set RDMAFLOW_JOB_TOKEN to a shorter secret"));
  }
  return JobToken{std::move(value), std::move(source)};
}

absl::StatusOr<JobToken> JobTokenFromEnvironment() {
  return JobTokenFrom([](absl::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  });
}

bool JobTokenMatches(absl::string_view expected, absl::string_view presented) {
  // Every byte of `presented` is compared, against `expected` repeated, and
  // the differences are OR-ed together: no early exit. `volatile` keeps the
  // compiler from turning the loop into one that stops at the first
  // difference.
  volatile unsigned char diff =
      expected.empty() || expected.size() != presented.size() ? 1 : 0;
  const size_t n = expected.size();
  for (size_t i = 0; i < presented.size(); ++i) {
    const unsigned char want =
        n == 0 ? 0 : static_cast<unsigned char>(expected[i % n]);
    diff = diff | (want ^ static_cast<unsigned char>(presented[i]));
  }
  return diff == 0;
}

absl::StatusOr<std::string> JobTokenProof(absl::string_view token, absl::string_view message) {
  if (token.size() > kMaxJobTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a job token of ", token.size(), " bytes, more than ", kMaxJobTokenBytes));
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  // An empty key is passed as a valid pointer: OpenSSL treats a null key as
  // "reuse the previous one".
  static const char kNoKey = 0;
  if (HMAC(EVP_sha256(), token.empty() ? &kNoKey : token.data(),
           static_cast<int>(token.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest,
           &length) == nullptr ||
      length != 32) {
    return absl::InternalError(
        "HMAC-SHA256 of the job token failed in OpenSSL (is libcrypto usable here?)");
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), length));
}

}  // namespace rdmaflow::rdma
