// File: admission.cc
#include "rdma/ibverbs/admission.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rdma/ibverbs/wire.h"
#include "rdma/job_token.h"

namespace rdmaflow::rdma::ibverbs {
namespace {

absl::StatusOr<std::string> TruncatedProof(absl::string_view job_token,
                                           absl::string_view message) {
  ASSIGN_OR_RETURN(const std::string proof, JobTokenProof(job_token, message));
  return absl::HexStringToBytes(proof).substr(0, kHandshakeMacBytes);
}

// Length-prefixed, so that no two (label, fields) pairs give one message.
std::string Framed(absl::string_view label, absl::string_view fields) {
  std::string message;
  wire::Put<uint32_t>(message, static_cast<uint32_t>(label.size()));
  message.append(label.data(), label.size());
  wire::Put<uint32_t>(message, static_cast<uint32_t>(fields.size()));
  message.append(fields.data(), fields.size());
  return message;
}

}  // namespace

absl::StatusOr<uint64_t> RandomNonce() {
  uint64_t nonce = 0;
  size_t got = 0;
  while (got < sizeof(nonce)) {
    const ssize_t n = getrandom(reinterpret_cast<char*>(&nonce) + got,
                                sizeof(nonce) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::InternalError(absl::StrCat(
          "getrandom() for a handshake nonce: ", std::strerror(errno)));
    }
    got += static_cast<size_t>(n);
  }
  return nonce;
}

absl::StatusOr<std::string> RequestMac(absl::string_view job_token,
                                       absl::string_view label,
                                       absl::string_view fields, uint64_t nonce,
                                       const HandshakeTarget& target) {
  std::string message = Framed(label, fields);
  wire::Put<uint64_t>(message, nonce);
  wire::Put<int32_t>(message, target.rank);
  wire::Put<uint64_t>(message, target.instance);
  return TruncatedProof(job_token, message);
}

absl::StatusOr<std::string> AnswerMac(absl::string_view job_token,
                                      absl::string_view label,
                                      absl::string_view fields,
                                      uint64_t request_nonce) {
  std::string message = Framed(label, fields);
  wire::Put<uint64_t>(message, request_nonce);
  return TruncatedProof(job_token, message);
}

absl::Status CheckMac(absl::string_view expected, absl::string_view presented) {
  if (JobTokenMatches(expected, presented)) return absl::OkStatus();
  return absl::PermissionDeniedError(
      "its proof of the job token does not verify (another job or a "
      "different RDMAFLOW_JOB_TOKEN; or meant for another rank, or for an "
      "earlier process at this address, or answering another request)");
}

absl::Status CheckClaimedRank(int32_t rank, int local_rank, int world_size) {
  if (rank < 0 || (world_size > 0 && rank >= world_size)) {
    return absl::InvalidArgumentError(
        world_size > 0
            ? absl::StrCat("rank ", rank, " is outside the job's ranks 0..",
                           world_size - 1)
            : absl::StrCat("rank ", rank, " is negative"));
  }
  if (rank == local_rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank,
                     " is this listener's own rank; is RANK set the same on "
                     "two processes?"));
  }
  return absl::OkStatus();
}

std::string ClaimerOf(absl::string_view address, uint64_t marker_address,
                      uint32_t marker_rkey) {
  return absl::StrCat(address, " (marker region 0x", absl::Hex(marker_address),
                      " rkey 0x", absl::Hex(marker_rkey), ")");
}

absl::StatusOr<PeerAdmission> PeerAdmission::Create(
    const AdmissionOptions& options) {
  if (options.max_pending < 1 || options.max_connections < 1 ||
      options.max_connections_per_rank < 1 ||
      options.max_remembered_nonces < 1) {
    return absl::InvalidArgumentError(
        "listener caps out of range: max_pending, max_connections, "
        "max_connections_per_rank and max_remembered_nonces must be >= 1");
  }
  return PeerAdmission(options);
}

bool PeerAdmission::Remember(uint64_t nonce) {
  if (!nonces_.insert(nonce).second) return false;
  nonce_order_.push_back(nonce);
  if (nonce_order_.size() > options_.max_remembered_nonces) {
    if (!forgot_) {
      forgot_ = true;
      std::fprintf(stderr,
                   "rdmaflow ibverbs: rank %d has verified %zu handshake "
                   "requests; from now on it forgets the oldest nonces\n",
                   options_.local_rank, options_.max_remembered_nonces);
    }
    nonces_.erase(nonce_order_.front());
    nonce_order_.pop_front();
  }
  return true;
}

absl::Status PeerAdmission::Admit(const Claim& claim) {
  if (!Remember(claim.nonce)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "a replayed request (its nonce was seen before) claiming rank ",
        claim.rank));
  }
  RETURN_IF_ERROR(CheckClaimedRank(claim.rank, options_.local_rank,
                                   options_.world_size));
  auto it = holders_.find(claim.rank);
  if (it != holders_.end() && it->second.connections > 0) {
    const Holder& holder = it->second;
    if (holder.claimer != claim.claimer) {
      return absl::AlreadyExistsError(absl::StrCat(
          "rank ", claim.rank, " already holds ", holder.connections,
          " connection(s) from ", holder.claimer, ", and ", claim.claimer,
          " claims it too: two processes claim rank ", claim.rank,
          " (is RANK set the same on two processes? a restarted rank "
          "connects once its old connections are torn down)"));
    }
    if (holder.connections >= options_.max_connections_per_rank) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "rank ", claim.rank, " already holds its ", holder.connections,
          " connections (max_connections_per_rank: endpoints per peer times "
          "qps_per_peer)"));
    }
  }
  if (connections_ >= options_.max_connections) {
    return absl::ResourceExhaustedError(absl::StrCat(
        connections_, " connections are open or pending already (at most ",
        options_.max_connections, "); refusing rank ", claim.rank));
  }
  if (pending_ >= options_.max_pending) {
    return absl::UnavailableError(absl::StrCat(
        pending_, " queue pairs await their peers' confirmation "
        "(max_pending_queue_pairs); retry"));
  }
  Holder& holder = holders_[claim.rank];
  holder.claimer = claim.claimer;
  ++holder.connections;
  ++pending_;
  ++connections_;
  return absl::OkStatus();
}

void PeerAdmission::Established(int32_t rank) {
  if (holders_.count(rank) == 0 || pending_ == 0) return;
  --pending_;
}

void PeerAdmission::Release(int32_t rank, bool established) {
  auto it = holders_.find(rank);
  if (it == holders_.end() || it->second.connections == 0) return;
  if (--it->second.connections == 0) holders_.erase(it);
  --connections_;
  if (!established && pending_ > 0) --pending_;
}

int PeerAdmission::connections_of(int32_t rank) const {
  auto it = holders_.find(rank);
  return it == holders_.end() ? 0 : it->second.connections;
}

}  // namespace rdmaflow::rdma::ibverbs
