// File: host_groups_test.cc
// GroupByHost over an in-memory store, ranks as threads: members grouped
// by the identities they publish (in member order), a peer's forged or
// missing identity, and LocalHostIdentity()'s override.
#include "collectives/host_groups.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/rendezvous.h"
#include "rdma/testing/rank_threads.h"

namespace rdmaflow::collectives {
namespace {

using ::rdmaflow::rdma::testing::RunRankThreads;
using ::rdmaflow::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(HostGroupsTest, MembersAreGroupedByIdentityInMemberOrder) {
  const std::vector<std::string> identity = {"b", "a", "b", "c", "a"};
  const std::vector<int> members = {4, 0, 1, 2, 3};
  std::vector<HostGroups> groups(5);
  std::vector<absl::Status> statuses = RunRankThreads(
      5, [&](int rank, rdma::Transport&, rdma::Store& store) -> absl::Status {
        absl::StatusOr<HostGroups> got = GroupByHost(store, "t", "g", members, rank,
                                                     identity[rank], absl::Seconds(30));
        if (!got.ok()) return got.status();
        groups[rank] = *got;
        return absl::OkStatus();
      });
  for (int rank = 0; rank < 5; ++rank) {
    ASSERT_OK(statuses[rank]);
    // Hosts in the order of their first member: 4 (a), 0 (b), 3 (c).
    EXPECT_THAT(groups[rank].hosts, ElementsAre(ElementsAre(4, 1), ElementsAre(0, 2),
                                                ElementsAre(3)));
  }
  EXPECT_EQ(groups[0].mine, 1);
  EXPECT_EQ(groups[1].mine, 0);
  EXPECT_EQ(groups[3].mine, 2);
}

TEST(HostGroupsTest, AForgedIdentityIsRefusedNamingItsRank) {
  std::vector<absl::Status> statuses = RunRankThreads(
      2, [&](int rank, rdma::Transport&, rdma::Store& store) -> absl::Status {
        if (rank == 1) {
          return rdma::PublishProven(store, "t", "group/g/1/host",
                                     std::string(kMaxHostIdentity + 1, 'x'));
        }
        return GroupByHost(store, "t", "g", {0, 1}, 0, "h", absl::Seconds(30)).status();
      });
  EXPECT_THAT(statuses[0], StatusIs(absl::StatusCode::kDataLoss,
                                    HasSubstr("rank 1 published a host identity of 257 bytes")));
  EXPECT_OK(statuses[1]);
}

// An identity written into the store without the job token's proof (a
// store writer making a rank of another host look local) is refused.
TEST(HostGroupsTest, AnIdentityWithoutTheJobsProofIsRefused) {
  std::vector<absl::Status> statuses = RunRankThreads(
      2, [&](int rank, rdma::Transport&, rdma::Store& store) -> absl::Status {
        if (rank == 1) {
          // A record proven for another key, copied here; then, for a
          // second grouping, bytes that are no record at all.
          RETURN_IF_ERROR(rdma::PublishProven(store, "t", "group/g/9/host", "h"));
          ASSIGN_OR_RETURN(std::string copied, store.Get("t/group/g/9/host", absl::Seconds(1)));
          RETURN_IF_ERROR(store.Set("t/group/g/1/host", copied));
          return store.Set("t/group/raw/1/host", "h");
        }
        EXPECT_THAT(GroupByHost(store, "t", "raw", {0, 1}, 0, "h", absl::Seconds(30)).status(),
                    StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 1's host")));
        return GroupByHost(store, "t", "g", {0, 1}, 0, "h", absl::Seconds(30)).status();
      });
  EXPECT_THAT(statuses[0], StatusIs(absl::StatusCode::kPermissionDenied,
                                    HasSubstr("rank 1's host")));
  EXPECT_OK(statuses[1]);
}

TEST(HostGroupsTest, AMemberThatNeverPublishesIsATimeoutNamingIt) {
  std::vector<absl::Status> statuses = RunRankThreads(
      2, [&](int rank, rdma::Transport&, rdma::Store& store) -> absl::Status {
        if (rank == 1) return absl::OkStatus();
        return GroupByHost(store, "t", "g", {0, 1}, 0, "h", absl::Milliseconds(200)).status();
      });
  EXPECT_THAT(statuses[0], StatusIs(absl::StatusCode::kDeadlineExceeded,
                                    HasSubstr("rank 1's host")));
}

TEST(HostGroupsTest, BadMembersOrIdentityAreRefused) {
  std::vector<absl::Status> statuses = RunRankThreads(
      1, [&](int, rdma::Transport&, rdma::Store& store) -> absl::Status {
        EXPECT_THAT(GroupByHost(store, "t", "g", {1, 2}, 0, "h", absl::Seconds(1)).status(),
                    StatusIs(absl::StatusCode::kInvalidArgument));
        EXPECT_THAT(GroupByHost(store, "t", "g", {0}, 0, "", absl::Seconds(1)).status(),
                    StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("host identity")));
        return absl::OkStatus();
      });
  EXPECT_OK(statuses[0]);
}

TEST(HostGroupsTest, LocalIdentityIsTheEnvironmentsOrTheKernels) {
  ::unsetenv("RDMAFLOW_HOST");
  absl::StatusOr<std::string> detected = LocalHostIdentity();
  ASSERT_OK(detected);
  EXPECT_THAT(*detected, HasSubstr("/pid:["));  // host name / boot id / PID namespace
  ::setenv("RDMAFLOW_HOST", "rack3-node7", 1);
  EXPECT_THAT(LocalHostIdentity(), ::rdmaflow::testing::IsOkAndHolds(std::string("rack3-node7")));
  ::setenv("RDMAFLOW_HOST", "two words", 1);
  EXPECT_THAT(LocalHostIdentity(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("RDMAFLOW_HOST")));
  ::unsetenv("RDMAFLOW_HOST");
}

}  // namespace
}  // namespace rdmaflow::collectives
