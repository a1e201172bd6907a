#include "rdma/rendezvous.h"

#include <cstdio>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rdma/job_token.h"
#include "rdma/remote_region.pb.h"

namespace rdmaflow::rdma {
namespace {

constexpr uint32_t kAddressVersion = 1;
constexpr uint32_t kRecordVersion = 1;

std::string AddressKey(absl::string_view ns, int rank) {
  return absl::StrCat(ns, "/address/", rank);
}

// What an address record's proof covers: the namespace and rank it is
// published for, so a record copied under another key does not verify.
std::string ProvenMessage(absl::string_view ns, int rank, absl::string_view address) {
  return absl::StrCat("rdmaflow-address-v1/", ns, "/", rank, "/", address);
}

// What a proven record's proof covers: the namespace and key it is
// published under (length-prefixed, as both may hold '/'), and its value.
std::string ProvenRecord(absl::string_view ns, absl::string_view key,
                         absl::string_view value) {
  return absl::StrCat("rdmaflow-record-v1/", ns.size(), ":", ns, "/", key.size(), ":", key,
                      "/", value);
}

}  // namespace

absl::Status PublishAddress(Store& store, absl::string_view ns,
                            const Transport& transport) {
  ASSIGN_OR_RETURN(JobToken token, JobTokenFromEnvironment());
  PublishedAddressProto record;
  record.set_version(kAddressVersion);
  record.set_rank(transport.rank());
  record.set_address(transport.address());
  ASSIGN_OR_RETURN(std::string proof,
                   JobTokenProof(token.value,
                                 ProvenMessage(ns, transport.rank(), record.address())));
  record.set_proof(std::move(proof));
  return store.Set(AddressKey(ns, transport.rank()), record.SerializeAsString());
}

absl::StatusOr<std::unique_ptr<Endpoint>> ConnectToPeer(
    Transport& transport, Store& store, absl::string_view ns, int peer_rank,
    absl::Duration timeout) {
  const std::string key = AddressKey(ns, peer_rank);
  absl::StatusOr<std::string> bytes = store.Get(key, timeout);
  if (!bytes.ok()) {
    return absl::Status(
        bytes.status().code(),
        absl::StrCat("rank ", transport.rank(),
                     " could not get the transport address of rank ",
                     peer_rank, ": ", bytes.status().message(),
                     " (is rank ", peer_rank,
                     " running, with the same store address and namespace?)"));
  }
  // Written by whoever can reach the store: checked before it is used.
  PublishedAddressProto record;
  if (!record.ParseFromString(*bytes) || record.version() != kAddressVersion ||
      record.rank() != peer_rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", transport.rank(), ": the address record of rank ", peer_rank,
        " in the store (", key, ", ", bytes->size(),
        " bytes) is not one this rdmaflow version publishes"));
  }
  ASSIGN_OR_RETURN(JobToken token, JobTokenFromEnvironment());
  ASSIGN_OR_RETURN(const std::string expected,
                   JobTokenProof(token.value, ProvenMessage(ns, peer_rank, record.address())));
  if (!JobTokenMatches(expected, record.proof())) {
    absl::Status refused = absl::PermissionDeniedError(absl::StrCat(
        "rank ", transport.rank(), ": the address of rank ", peer_rank, " in the store (",
        key, ") was not published with this job's token (", token.source,
        "): another job shares the store, or the record was forged; give every rank "
        "of a job the same RDMAFLOW_JOB_TOKEN"));
    std::fprintf(stderr, "rdmaflow: %s\n", std::string(refused.message()).c_str());
    return refused;
  }
  return transport.Connect(PeerInfo{peer_rank, record.address()});
}

absl::Status PublishProven(Store& store, absl::string_view ns, absl::string_view key,
                           absl::string_view value) {
  ASSIGN_OR_RETURN(JobToken token, JobTokenFromEnvironment());
  ProvenRecordProto record;
  record.set_version(kRecordVersion);
  record.set_value(std::string(value));
  ASSIGN_OR_RETURN(std::string proof, JobTokenProof(token.value, ProvenRecord(ns, key, value)));
  record.set_proof(std::move(proof));
  return store.Set(absl::StrCat(ns, "/", key), record.SerializeAsString());
}

absl::StatusOr<std::string> FetchProven(Store& store, absl::string_view ns,
                                        absl::string_view key, absl::Duration timeout) {
  const std::string full_key = absl::StrCat(ns, "/", key);
  ASSIGN_OR_RETURN(std::string bytes, store.Get(full_key, timeout));
  // Written by whoever can reach the store: proven before it is used.
  ProvenRecordProto record;
  if (!record.ParseFromString(bytes) || record.version() != kRecordVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the record in the store under ", full_key, " (", bytes.size(),
        " bytes) is not one this rdmaflow version publishes (a peer of another version?)"));
  }
  ASSIGN_OR_RETURN(JobToken token, JobTokenFromEnvironment());
  ASSIGN_OR_RETURN(const std::string expected,
                   JobTokenProof(token.value, ProvenRecord(ns, key, record.value())));
  if (!JobTokenMatches(expected, record.proof())) {
    absl::Status refused = absl::PermissionDeniedError(absl::StrCat(
        "the record under ", full_key, " was not published with this job's token (",
        token.source, "): another job shares the store, or the record was forged or copied "
        "from another key; give every rank of a job the same RDMAFLOW_JOB_TOKEN"));
    std::fprintf(stderr, "rdmaflow: %s\n", std::string(refused.message()).c_str());
    return refused;
  }
  return std::move(*record.mutable_value());
}

absl::Status PublishRegion(Store& store, absl::string_view ns,
                           absl::string_view key, const RemoteRegion& region) {
  return PublishProven(store, ns, key, region.Serialize());
}

absl::StatusOr<RemoteRegion> FetchRegion(Store& store, absl::string_view ns,
                                         absl::string_view key,
                                         absl::Duration timeout) {
  ASSIGN_OR_RETURN(std::string bytes, FetchProven(store, ns, key, timeout));
  return RemoteRegion::Parse(bytes);
}

absl::Status CheckPeerLayout(Store& store, absl::string_view ns,
                             absl::string_view key, absl::string_view layout,
                             int peer, absl::Duration timeout,
                             absl::string_view what) {
  absl::StatusOr<std::string> theirs = store.Get(absl::StrCat(ns, "/", key), timeout);
  if (!theirs.ok()) {
    return absl::Status(theirs.status().code(),
                        absl::StrCat(what, ": rank ", peer, " never joined: ",
                                     theirs.status().message()));
  }
  if (*theirs != layout) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": rank ", peer, " created it with '", *theirs, "' but this rank with '",
        layout, "'; every rank must create it with the same options"));
  }
  return absl::OkStatus();
}

namespace {

// Once a polling barrier has passed, the store's host may leave (its
// process exits) while another rank still reads the count, which then
// fails as if the store were lost. So every rank counts itself out, and a
// polling one reads that count until all are out: the host leaves only
// after each rank stopped reading the first. (A rank at the same barrier
// without a transport, `pass_time` null, waits for a mark that the store
// answers all at once, so it only counts itself out; the host leaves last
// only where it polls.) Nothing here fails the barrier, which has passed:
// a store gone, a transport failing or the deadline (a rank that died
// after arriving) ends the wait.
// `left` is what counting this rank out answered.
void LeaveTogether(Store& store, absl::string_view prefix, int world_size,
                   absl::Time deadline,
                   const absl::FunctionRef<absl::Status(absl::Time)>* pass_time,
                   absl::StatusOr<int64_t> left) {
  if (pass_time == nullptr) return;
  const std::string key = absl::StrCat(prefix, "/left");
  while (left.ok() && *left < world_size && absl::Now() < deadline) {
    if (!(*pass_time)(absl::Now() + absl::Milliseconds(1)).ok()) return;
    left = store.Add(key, 0);
  }
}

absl::Status BarrierOf(Store& store, absl::string_view ns, absl::string_view name,
                       int world_size, absl::Duration timeout,
                       const absl::FunctionRef<absl::Status(absl::Time)>* pass_time) {
  const std::string prefix = absl::StrCat(ns, "/barrier/", name);
  const absl::Time deadline = absl::Now() + timeout;
  ASSIGN_OR_RETURN(int64_t arrived, store.Add(prefix + "/count", 1));
  if (arrived == world_size) {
    // The last to arrive knows at once: no wait (the store's host may be
    // leaving as soon as it sees the mark). A set is not answered; an Add
    // is, after it on the same connection: counting this rank out also
    // says the mark has landed.
    RETURN_IF_ERROR(store.Set(prefix + "/done", "1"));
    absl::StatusOr<int64_t> left = store.Add(prefix + "/left", 1);
    RETURN_IF_ERROR(left.status());
    LeaveTogether(store, prefix, world_size, deadline, pass_time, left);
    return absl::OkStatus();
  }
  absl::Status status;
  if (pass_time == nullptr) {
    status = store.Wait({prefix + "/done"}, timeout);
    // Counted out for the polling ranks of a barrier that mixes both (the
    // answer is not needed: this rank does not wait for the others).
    if (status.ok()) store.Add(prefix + "/left", 1).IgnoreError();
  } else {
    // Progress for a millisecond at a time, then read the count (an Add of
    // 0 answers at once; a store wait cut short by its own timeout would
    // leave a late reply in a TCPStore connection's stream).
    while (arrived < world_size && absl::Now() < deadline) {
      RETURN_IF_ERROR((*pass_time)(absl::Now() + absl::Milliseconds(1)));
      ASSIGN_OR_RETURN(arrived, store.Add(prefix + "/count", 0));
    }
    if (arrived >= world_size) {
      LeaveTogether(store, prefix, world_size, deadline, pass_time,
                    store.Add(prefix + "/left", 1));
      return absl::OkStatus();
    }
    status = absl::DeadlineExceededError("");
  }
  if (absl::IsDeadlineExceeded(status)) {
    absl::StatusOr<int64_t> now = store.Add(prefix + "/count", 0);
    return absl::DeadlineExceededError(absl::StrCat(
        "barrier '", name, "' timed out after ", absl::FormatDuration(timeout),
        ": ", now.ok() ? absl::StrCat(*now) : std::string("?"), " of ",
        world_size, " ranks arrived"));
  }
  return status;
}

}  // namespace

absl::Status Barrier(Store& store, absl::string_view ns, absl::string_view name,
                     int world_size, absl::Duration timeout) {
  return BarrierOf(store, ns, name, world_size, timeout, nullptr);
}

absl::Status Barrier(Store& store, absl::string_view ns, absl::string_view name,
                     int world_size, absl::Duration timeout,
                     absl::FunctionRef<absl::Status(absl::Time until)> pass_time) {
  return BarrierOf(store, ns, name, world_size, timeout, &pass_time);
}

}  // namespace rdmaflow::rdma
