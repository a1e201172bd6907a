// File: job_token.h
// -----------------------------------------------------------------------------
// The per-job token that every connection handshake carries, so that a
// listener refuses connections that do not belong to its job: another job on
// the same hosts, a stale rank of an earlier run, a port scanner. Every rank
// of a job computes the same token from its launcher's environment:
//
//   1. RDMAFLOW_JOB_TOKEN, when set: a secret the launcher generates once per
//      job and gives every rank (e.g. `openssl rand -hex 16`). This is the
//      only source that keeps out someone who can reach the ports on purpose.
//   2. Else derived from TORCHELASTIC_RUN_ID, MASTER_ADDR and MASTER_PORT
//      (whichever are set): two jobs differ even when both keep torchrun's
//      default run id "none", as long as their stores differ. This is not a
//      secret (anyone who can list the job's processes can read them); it
//      separates jobs from each other, it does not keep attackers out.
//   3. Else a fixed default (single-process runs and tests).
//
// Torch-free and dependency-light (Abseil only): rdma/ interfaces and
// backends use it.
#ifndef RDMAFLOW_RDMA_JOB_TOKEN_H_
#define RDMAFLOW_RDMA_JOB_TOKEN_H_

#include <cstddef>
#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rdmaflow::rdma {

// A token longer than this is refused (it must fit one handshake message).
inline constexpr size_t kMaxJobTokenBytes = 1024;

// The token used when the environment names no job.
inline constexpr char kDefaultJobToken[] = "rdmaflow-default-job-token-v1";

// Value type.
struct JobToken {
  std::string value;
  // Where `value` came from, for logs and error messages; never the value
  // itself. E.g. "RDMAFLOW_JOB_TOKEN".
  std::string source;
};

// The job token from the process environment (see the file comment).
// kInvalidArgument when RDMAFLOW_JOB_TOKEN is set but empty or longer than
// kMaxJobTokenBytes, or when the derived token would be that long.
absl::StatusOr<JobToken> JobTokenFromEnvironment();

// The same, reading variables through `get` (nullopt: unset), for tests and
// for launchers that hold the environment of another process.
absl::StatusOr<JobToken> JobTokenFrom(
    absl::FunctionRef<std::optional<std::string>(absl::string_view name)> get);

// True when `presented` equals `expected` and `expected` is not empty (an
// empty expected token or proof is a failure upstream, and matches
// nothing: the check fails closed). The time taken depends only on the
// length of `presented` (which its sender knows), not on where the two
// differ, so a remote peer cannot find the token byte by byte.
bool JobTokenMatches(absl::string_view expected, absl::string_view presented);

// HMAC-SHA256 of `message` keyed with `token`, as 64 lowercase hex digits:
// proves that whoever wrote `message` (e.g. an address published in the
// store) holds the job's token, without revealing it to readers of the
// store. kInternal when OpenSSL cannot compute it (never an empty proof).
absl::StatusOr<std::string> JobTokenProof(absl::string_view token, absl::string_view message);

}  // namespace rdmaflow::rdma

#endif  // RDMAFLOW_RDMA_JOB_TOKEN_H_
