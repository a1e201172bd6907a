// File: rendezvous.h
// -----------------------------------------------------------------------------
// The control plane: ranks publish their transport address and region
// descriptors in a Store and fetch their peers', before any data moves.
// Key layout (all under a caller-chosen namespace `ns`, so several jobs or
// phases can share one store):
//   <ns>/address/<rank>      Transport::address() of each rank
//   <ns>/<key>               published regions and other proven values:
//                            the value with a proof of the job token
//                            (ProvenRecordProto; PublishProven/FetchProven)
//   <ns>/barrier/<name>/...  barrier counters (count: arrived; left: seen it
//                            pass; done: the last one's mark)
#ifndef RDMAFLOW_RDMA_RENDEZVOUS_H_
#define RDMAFLOW_RDMA_RENDEZVOUS_H_

#include <memory>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rdma/endpoint.h"
#include "rdma/remote_region.h"
#include "rdma/store.h"
#include "rdma/transport.h"

namespace rdmaflow::rdma {

// Publishes transport.address() for transport.rank(), with a proof that it
// was published by a holder of the job's token (rdma/job_token.h, from the
// environment). kInvalidArgument for a malformed RDMAFLOW_JOB_TOKEN.
absl::Status PublishAddress(Store& store, absl::string_view ns,
                            const Transport& transport);

// Waits for `peer_rank`'s address and connects to it.
// kDeadlineExceeded (the peer never published: is it running, with the same
// MASTER_ADDR/MASTER_PORT?); kInvalidArgument for a record that does not
// parse or names another rank; kPermissionDenied (also logged) for one not
// published with this job's token; or Connect()'s error.
absl::StatusOr<std::unique_ptr<Endpoint>> ConnectToPeer(
    Transport& transport, Store& store, absl::string_view ns, int peer_rank,
    absl::Duration timeout);

// Publishes `value` under <ns>/<key> with a proof that a holder of the
// job's token (rdma/job_token.h, from the environment) published it there.
// kInvalidArgument for a malformed RDMAFLOW_JOB_TOKEN.
absl::Status PublishProven(Store& store, absl::string_view ns, absl::string_view key,
                           absl::string_view value);

// Waits for the value under <ns>/<key> and checks its proof.
// kDeadlineExceeded; kInvalidArgument for a record that does not parse;
// kPermissionDenied (also logged) for one not published with this job's
// token under this key.
absl::StatusOr<std::string> FetchProven(Store& store, absl::string_view ns,
                                        absl::string_view key, absl::Duration timeout);

// Publishes a region descriptor under <ns>/<key> (PublishProven).
absl::Status PublishRegion(Store& store, absl::string_view ns,
                           absl::string_view key, const RemoteRegion& region);

// Waits for the descriptor under <ns>/<key>, checks its proof
// (FetchProven) and parses it.
// kDeadlineExceeded; kInvalidArgument for a malformed record or descriptor;
// kPermissionDenied (also logged) for one not published with this job's
// token under this key.
absl::StatusOr<RemoteRegion> FetchRegion(Store& store, absl::string_view ns,
                                         absl::string_view key,
                                         absl::Duration timeout);

// Waits for the layout a peer published under <ns>/<key> (a description of
// the options that must be the same everywhere, set with Store::Set) and
// compares it with ours. `what` names the object in messages ("ring 'x' on
// rank 0"). kDeadlineExceeded: the peer never joined; kFailedPrecondition
// quoting both layouts when they differ.
absl::Status CheckPeerLayout(Store& store, absl::string_view ns,
                             absl::string_view key, absl::string_view layout,
                             int peer, absl::Duration timeout,
                             absl::string_view what);

// Blocks until `world_size` ranks have entered barrier `name`. Each name may
// be used once per job. kDeadlineExceeded says how many ranks arrived.
absl::Status Barrier(Store& store, absl::string_view ns,
                     absl::string_view name, int world_size,
                     absl::Duration timeout);
// The same, keeping a transport progressing while it waits: between reads
// of the count it calls `pass_time(until)`, which progresses until `until`
// (a millisecond ahead) and returns its failure, which ends the barrier
// (onesided::Barrier passes its ProgressLoop's). Where a backend emulates
// one-sided operations in software (UCX over TCP), peers still finishing
// their writes into, or reads from, this rank need it. Once it passed, it
// also waits (until the same deadline, never failing) for every rank to
// have seen it pass, so that the rank hosting the store, where it polls,
// leaves last. (Ranks of the plain Barrier above count themselves out
// without waiting.)
absl::Status Barrier(Store& store, absl::string_view ns,
                     absl::string_view name, int world_size,
                     absl::Duration timeout,
                     absl::FunctionRef<absl::Status(absl::Time until)> pass_time);

}  // namespace rdmaflow::rdma

#endif  // RDMAFLOW_RDMA_RENDEZVOUS_H_
