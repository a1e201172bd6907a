// File: host_groups.h
// -----------------------------------------------------------------------------
// Which members of a collective share a host, so that a hierarchical
// collective can reduce within each host over shared memory first and send
// only one rank's data per host across the network.
//
// "A host" is what shares memory the way the transports see it: UCX uses
// shared memory between processes of one boot of one kernel in the same PID
// namespace, so the identity is the host name, the kernel's boot id and the
// PID namespace (network-namespace "hosts" on one machine, each started in
// a PID namespace of its own, are told apart as UCX tells them apart).
// RDMAFLOW_HOST overrides it (containers that share memory across PID
// namespaces, or tests).
//
//   ASSIGN_OR_RETURN(std::string me, LocalHostIdentity());
//   ASSIGN_OR_RETURN(HostGroups hosts, GroupByHost(store, "job", "grads",
//                                                  members, rank, me, timeout));
//   hosts.hosts[hosts.mine]   // our host's members, in member order
#ifndef RDMAFLOW_COLLECTIVES_HOST_GROUPS_H_
#define RDMAFLOW_COLLECTIVES_HOST_GROUPS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rdma/store.h"

namespace rdmaflow::collectives {

// The longest host identity accepted, ours or a peer's.
constexpr size_t kMaxHostIdentity = 256;

// RDMAFLOW_HOST when set (kInvalidArgument unless it is 1-256 printable
// characters without spaces), else "<hostname>/<boot id>/<pid namespace>".
absl::StatusOr<std::string> LocalHostIdentity();

struct HostGroups {
  // The members of each host, in member order; hosts ordered by their
  // first member's position.
  std::vector<std::vector<int>> hosts;
  int mine = 0;  // the caller's host, an index into `hosts`
};

// Publishes `identity` as <ns>/group/<name>/<rank>/host and reads every
// member's (each waited for up to `timeout`). kDeadlineExceeded naming a
// member that never published; kDataLoss for a peer's identity that is
// empty or longer than kMaxHostIdentity (the store's values are untrusted);
// kInvalidArgument for bad members or our own identity.
absl::StatusOr<HostGroups> GroupByHost(rdma::Store& store, absl::string_view ns,
                                       absl::string_view name,
                                       const std::vector<int>& members, int rank,
                                       absl::string_view identity, absl::Duration timeout);

}  // namespace rdmaflow::collectives

#endif  // RDMAFLOW_COLLECTIVES_HOST_GROUPS_H_
