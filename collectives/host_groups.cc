// File: host_groups.cc
#include "collectives/host_groups.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "collectives/members.h"
#include "common/status_macros.h"
#include "rdma/rendezvous.h"

namespace rdmaflow::collectives {
namespace {

bool Printable(absl::string_view text) {
  for (char c : text) {
    if (!absl::ascii_isgraph(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

std::string FirstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return std::string(absl::StripAsciiWhitespace(line));
}

}  // namespace

absl::StatusOr<std::string> LocalHostIdentity() {
  if (const char* given = std::getenv("RDMAFLOW_HOST"); given != nullptr && *given != '\0') {
    const absl::string_view text(given);
    if (text.size() > kMaxHostIdentity || !Printable(text)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "RDMAFLOW_HOST must be 1-", kMaxHostIdentity,
          " printable characters without spaces (it names this rank's host); got '",
          text.substr(0, 64), text.size() > 64 ? "...'" : "'"));
    }
    return std::string(text);
  }
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  std::string pid_namespace(64, '\0');
  const ssize_t length = readlink("/proc/self/ns/pid", pid_namespace.data(),
                                  pid_namespace.size());
  pid_namespace.resize(length > 0 ? static_cast<size_t>(length) : 0);
  std::string identity = absl::StrCat(host, "/", FirstLine("/proc/sys/kernel/random/boot_id"),
                                      "/", pid_namespace);
  if (identity.size() > kMaxHostIdentity) identity.resize(kMaxHostIdentity);
  return identity;
}

absl::StatusOr<HostGroups> GroupByHost(rdma::Store& store, absl::string_view ns,
                                       absl::string_view name,
                                       const std::vector<int>& members, int rank,
                                       absl::string_view identity, absl::Duration timeout) {
  const std::string what = absl::StrCat("host grouping of '", name, "'");
  ASSIGN_OR_RETURN(const int position, PositionOf(members, rank, what));
  if (identity.empty() || identity.size() > kMaxHostIdentity) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": rank ", rank, "'s host identity must be 1-", kMaxHostIdentity, " bytes"));
  }
  // Proven like every address in the store (rdma/rendezvous.h): a store
  // writer cannot make a rank of another host look local (which would send
  // it to map that rank's memory as shared).
  auto key = [&](int member) { return absl::StrCat("group/", name, "/", member, "/host"); };
  RETURN_IF_ERROR(rdma::PublishProven(store, ns, key(rank), identity));
  HostGroups groups;
  std::vector<std::string> identities;  // of groups.hosts, by index
  for (size_t p = 0; p < members.size(); ++p) {
    std::string theirs;
    if (static_cast<int>(p) == position) {
      theirs = std::string(identity);
    } else {
      absl::StatusOr<std::string> got = rdma::FetchProven(store, ns, key(members[p]), timeout);
      if (!got.ok()) {
        return absl::Status(got.status().code(),
                            absl::StrCat(what, " on rank ", rank, ": rank ", members[p],
                                         "'s host: ", got.status().message()));
      }
      theirs = *std::move(got);
      if (theirs.empty() || theirs.size() > kMaxHostIdentity) {
        return absl::DataLossError(absl::StrCat(
            what, " on rank ", rank, ": rank ", members[p], " published a host identity of ",
            theirs.size(), " bytes (1-", kMaxHostIdentity, " expected)"));
      }
    }
    size_t host = 0;
    while (host < identities.size() && identities[host] != theirs) ++host;
    if (host == identities.size()) {
      identities.push_back(std::move(theirs));
      groups.hosts.emplace_back();
    }
    groups.hosts[host].push_back(members[p]);
    if (static_cast<int>(p) == position) groups.mine = static_cast<int>(host);
  }
  return groups;
}

}  // namespace rdmaflow::collectives
