// File: allreduce_group_test.cc
// AllReduceGroup over loopback transports, ranks as threads. Loopback maps
// a peer's memory, so with direct access on the group takes the host
// algorithms (one-shot for small calls, scatter-gather for larger ones);
// with it off, the ring. Exact sums for 1-8 ranks across both paths and
// their boundary, bitwise-identical results for inexact float sums, half
// precision and max, subgroups, and the errors users meet: calls that
// differ between members, a member that never calls.
#include "collectives/allreduce_group.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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
using ::testing::AllOf;
using ::testing::HasSubstr;

float Value(int rank, size_t i) {
  return static_cast<float>((i * 7 + static_cast<size_t>(rank) * 13) % 1024);
}

std::vector<int> AllRanks(int world) {
  std::vector<int> members(world);
  std::iota(members.begin(), members.end(), 0);
  return members;
}

void ExpectAllOk(const std::vector<absl::Status>& statuses) {
  for (size_t r = 0; r < statuses.size(); ++r) EXPECT_OK(statuses[r]) << "rank " << r;
}

AllReduceGroupOptions Options(size_t capacity) {
  AllReduceGroupOptions options;
  options.ring.capacity_bytes = capacity;
  options.ring.chunk_bytes = 64 << 10;
  options.one_shot_max_bytes = 16 << 10;
  options.host_chunk_bytes = 4 << 10;
  options.ring.timeout = absl::Seconds(60);
  return options;
}

// Fills [offset, offset + count) with Value(), reduces, checks every
// element against the exact sum and the algorithm against `expected`.
absl::Status ReduceAndCheck(AllReduceGroup& group, int world, size_t offset_elems,
                            size_t count, AllReduceAlgorithm expected) {
  float* data = reinterpret_cast<float*>(group.data()) + offset_elems;
  const int rank = group.rank();
  for (size_t i = 0; i < count; ++i) data[i] = Value(rank, i);
  RETURN_IF_ERROR(group.AllReduce(offset_elems * 4, count, DataType::kFloat32));
  if (world > 1 && group.last_algorithm() != expected) {
    return absl::InternalError(absl::StrCat(count, " elements took ",
                                            AlgorithmName(group.last_algorithm()),
                                            ", expected ", AlgorithmName(expected)));
  }
  for (size_t i = 0; i < count; ++i) {
    float expected_sum = 0;
    for (int r = 0; r < world; ++r) expected_sum += Value(r, i);
    if (data[i] != expected_sum) {
      return absl::InternalError(absl::StrCat("rank ", rank, ", ", count, " elements (",
                                              AlgorithmName(group.last_algorithm()),
                                              "): element ", i, " is ", data[i],
                                              ", expected ", expected_sum));
    }
  }
  return absl::OkStatus();
}

TEST(AllReduceGroupTest, ExactSumsOnEveryPathForOneToEightRanks) {
  using A = AllReduceAlgorithm;
  struct Call {
    size_t offset, count;
    A host;  // the algorithm with direct access
  };
  // 16 KiB is the one-shot bound: 4096 floats are one-shot, 4097 not.
  const std::vector<Call> calls = {
      {0, 1, A::kHostOneShot},          {0, 3, A::kHostOneShot},
      {0, 4096, A::kHostOneShot},       {0, 4097, A::kHostScatterGather},
      {0, 1023, A::kHostOneShot},       {0, 65537, A::kHostScatterGather},
      {5, 7, A::kHostOneShot},          {12345, (size_t{1} << 20) + 5, A::kHostScatterGather},
      {0, 2, A::kHostOneShot},
  };
  for (DirectAccess direct : {DirectAccess::kAuto, DirectAccess::kOff}) {
    for (int world = 1; world <= 8; ++world) {
      SCOPED_TRACE(absl::StrCat(world, " ranks, direct ",
                                direct == DirectAccess::kAuto ? "auto" : "off"));
      ExpectAllOk(RunRankThreads(world, [&](int, rdma::Transport& transport,
                                            rdma::Store& store) -> absl::Status {
        AllReduceGroupOptions options = Options(8 << 20);
        options.direct = direct;
        ASSIGN_OR_RETURN(auto group, AllReduceGroup::Create(transport, store, "t",
                                                            AllRanks(world), options));
        if (group->direct() != (direct == DirectAccess::kAuto && world > 1)) {
          return absl::InternalError(absl::StrCat("direct access: ", group->direct()));
        }
        // One group, many calls of both kinds: counters carry over.
        for (const Call& call : calls) {
          RETURN_IF_ERROR(ReduceAndCheck(*group, world, call.offset, call.count,
                                         group->direct() ? call.host : A::kRing));
        }
        return group->Shutdown();
      }));
    }
  }
}

// Random floats of mixed magnitude: the sum depends on the order, so every
// member must reduce each element in the same order. `options(rank)`.
void ExpectInexactSumsBitwiseIdentical(
    int world, const std::function<AllReduceGroupOptions(int rank)>& options) {
  for (size_t count : {size_t{3000}, size_t{100003}}) {
    SCOPED_TRACE(absl::StrCat(count, " elements"));
    std::vector<std::vector<float>> results(world);
    ExpectAllOk(RunRankThreads(world, [&](int rank, rdma::Transport& transport,
                                          rdma::Store& store) -> absl::Status {
      ASSIGN_OR_RETURN(auto group, AllReduceGroup::Create(transport, store, "t",
                                                          AllRanks(world), options(rank)));
      float* data = reinterpret_cast<float*>(group->data());
      std::mt19937 random(static_cast<unsigned>(rank) * 7919 + 1);
      std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
      for (size_t i = 0; i < count; ++i) {
        data[i] = unit(random) * static_cast<float>(1 << (i % 20));
      }
      RETURN_IF_ERROR(group->AllReduce(0, count, DataType::kFloat32));
      results[rank].assign(data, data + count);
      return group->Shutdown();
    }));
    for (int r = 1; r < world; ++r) {
      ASSERT_EQ(results[r].size(), count);
      EXPECT_EQ(std::memcmp(results[r].data(), results[0].data(), count * 4), 0)
          << "rank " << r << " differs from rank 0";
    }
  }
}

TEST(AllReduceGroupTest, InexactSumsAreBitwiseIdenticalOnEveryRank) {
  ExpectInexactSumsBitwiseIdentical(5, [](int) { return Options(1 << 20); });
}

TEST(AllReduceGroupTest, HalfPrecisionAndMaxOnTheHostPaths) {
  for (size_t count : {size_t{1001}, size_t{50001}}) {
    for (DataType type : {DataType::kFloat16, DataType::kBFloat16}) {
      SCOPED_TRACE(absl::StrCat(DataTypeName(type), ", ", count, " elements"));
      ExpectAllOk(RunRankThreads(4, [&](int rank, rdma::Transport& transport,
                                        rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto group, AllReduceGroup::Create(transport, store, "t",
                                                            AllRanks(4), Options(1 << 20)));
        auto to = type == DataType::kFloat16 ? FloatToHalf : FloatToBFloat16;
        auto from = type == DataType::kFloat16 ? HalfToFloat : BFloat16ToFloat;
        uint16_t* data = reinterpret_cast<uint16_t*>(group->data());
        for (size_t i = 0; i < count; ++i) data[i] = to(static_cast<float>((i + rank) % 64));
        RETURN_IF_ERROR(group->AllReduce(0, count, type));
        for (size_t i = 0; i < count; ++i) {
          float expected = 0;
          for (int r = 0; r < 4; ++r) expected += static_cast<float>((i + r) % 64);
          if (from(data[i]) != expected) {
            return absl::InternalError(absl::StrCat("element ", i, ": ", from(data[i])));
          }
        }
        int32_t* ints = reinterpret_cast<int32_t*>(group->data());
        for (size_t i = 0; i < count; ++i) ints[i] = static_cast<int32_t>(rank * 1000 - i);
        RETURN_IF_ERROR(group->AllReduce(0, count, DataType::kInt32, ReduceOp::kMax));
        for (size_t i = 0; i < count; ++i) {
          if (ints[i] != static_cast<int32_t>(3000 - i)) {
            return absl::InternalError(absl::StrCat("max at ", i, ": ", ints[i]));
          }
        }
        return group->Shutdown();
      }));
    }
  }
}

TEST(AllReduceGroupTest, SubgroupInAnyOrder) {
  ExpectAllOk(RunRankThreads(4, [&](int rank, rdma::Transport& transport,
                                    rdma::Store& store) -> absl::Status {
    if (rank == 1) return absl::OkStatus();
    ASSIGN_OR_RETURN(auto group,
                     AllReduceGroup::Create(transport, store, "t", {3, 0, 2}, Options(1 << 20)));
    if (!group->direct()) return absl::InternalError("no direct access");
    for (size_t count : {size_t{100}, size_t{100000}}) {
      float* data = reinterpret_cast<float*>(group->data());
      for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>(rank + i);
      RETURN_IF_ERROR(group->AllReduce(0, count, DataType::kFloat32));
      for (size_t i = 0; i < count; ++i) {
        if (data[i] != static_cast<float>(5 + 3 * i)) {
          return absl::InternalError(absl::StrCat("element ", i, ": ", data[i]));
        }
      }
    }
    return group->Shutdown();
  }));
}

TEST(AllReduceGroupTest, WithDirectAccessEachMemberMayReduceAtItsOwnOffset) {
  constexpr int kWorld = 3;
  for (size_t count : {size_t{1000}, size_t{100001}}) {
    SCOPED_TRACE(absl::StrCat(count, " elements"));
    ExpectAllOk(RunRankThreads(kWorld, [&](int rank, rdma::Transport& transport,
                                           rdma::Store& store) -> absl::Status {
      ASSIGN_OR_RETURN(auto group, AllReduceGroup::Create(transport, store, "t",
                                                          AllRanks(kWorld), Options(1 << 20)));
      if (!group->direct()) return absl::InternalError("no direct access");
      const size_t offset = static_cast<size_t>(rank) * 4096 + 64;  // bytes
      for (int round = 0; round < 2; ++round) {
        RETURN_IF_ERROR(ReduceAndCheck(*group, kWorld, offset / 4, count,
                                       group->Choose(count * 4)));
      }
      return group->Shutdown();
    }));
  }
}

TEST(AllReduceGroupTest, CallsThatDifferBetweenMembersAreNamedAndTheGroupGoesOn) {
  for (size_t theirs : {size_t{200}, size_t{100000}}) {
    SCOPED_TRACE(absl::StrCat("rank 1 reduces ", theirs));
    const std::string ns = absl::StrCat("differ", theirs);
    std::vector<absl::Status> statuses = RunRankThreads(
        2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
          AllReduceGroupOptions options = Options(1 << 20);
          options.ring.timeout = absl::Seconds(10);
          ASSIGN_OR_RETURN(auto group,
                           AllReduceGroup::Create(transport, store, ns, {0, 1}, options));
          absl::Status status = group->AllReduce(0, rank == 0 ? 100 : theirs,
                                                 DataType::kFloat32);
          // Every member saw it and left the call: the next one works.
          RETURN_IF_ERROR(ReduceAndCheck(*group, 2, 0, 100, AllReduceAlgorithm::kHostOneShot));
          RETURN_IF_ERROR(group->Shutdown());
          return status;
        });
    EXPECT_THAT(statuses[0],
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("differs between members"),
                               HasSubstr("rank 1 called AllReduce(offset 0, count " +
                                         std::to_string(theirs) + ", float32 sum)"),
                               HasSubstr("rank 0 called AllReduce(offset 0, count 100"))));
    EXPECT_THAT(statuses[1], StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("rank 0 called AllReduce(offset 0, count 100")));
  }
}

TEST(AllReduceGroupTest, ABadRangeOnOneMemberIsAnErrorOnEveryMember) {
  // Each member passes its own offset, so only rank 1 knows its range is
  // bad: its call still meets rank 0's, which ends with an error too, and
  // the next call works on both.
  std::vector<absl::Status> statuses = RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        AllReduceGroupOptions options = Options(1 << 20);
        options.ring.timeout = absl::Seconds(10);
        ASSIGN_OR_RETURN(auto group,
                         AllReduceGroup::Create(transport, store, "t", {0, 1}, options));
        absl::Status status =
            group->AllReduce(rank == 1 ? (1 << 20) - 8 : 0, 100, DataType::kFloat32);
        RETURN_IF_ERROR(ReduceAndCheck(*group, 2, 0, 100, AllReduceAlgorithm::kHostOneShot));
        RETURN_IF_ERROR(group->Shutdown());
        return status;
      });
  EXPECT_THAT(statuses[0], StatusIs(absl::StatusCode::kInvalidArgument,
                                    HasSubstr("rank 1 called something with a bad range or "
                                              "root (offset 0, count 100;")));
  EXPECT_THAT(statuses[1], StatusIs(absl::StatusCode::kOutOfRange,
                                    HasSubstr("exceed its data region")));
}

TEST(AllReduceGroupTest, CallsThatReduceAlikeButDifferInVariantAreNamed) {
  // The c10d backend's AVG is a SUM with variant 1: it must not pair with
  // a SUM.
  std::vector<absl::Status> statuses = RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto group,
                         AllReduceGroup::Create(transport, store, "t", {0, 1}, Options(1 << 20)));
        absl::Status status = group->AllReduce(0, 100, DataType::kFloat32, ReduceOp::kSum,
                                               /*variant=*/rank == 0 ? 1 : 0);
        RETURN_IF_ERROR(group->Shutdown());
        return status;
      });
  for (int rank : {0, 1}) {
    EXPECT_THAT(statuses[rank], StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("float32 sum, variant 1)")))
        << "rank " << rank;
  }
}

TEST(AllReduceGroupTest, AMemberThatNeverCallsIsATimeoutNamingIt) {
  std::vector<absl::Status> statuses = RunRankThreads(
      3, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        AllReduceGroupOptions options = Options(1 << 20);
        options.ring.timeout = absl::Milliseconds(500);
        options.ring.liveness_interval = absl::Milliseconds(50);
        ASSIGN_OR_RETURN(auto group,
                         AllReduceGroup::Create(transport, store, "t", AllRanks(3), options));
        if (rank == 2) return store.Wait({"t/gave_up"}, absl::Seconds(30));
        absl::Status status = group->AllReduce(0, 1000, DataType::kFloat32);
        ASSIGN_OR_RETURN(int64_t gave_up, store.Add("t/count", 1));
        if (gave_up == 2) RETURN_IF_ERROR(store.Set("t/gave_up", "1"));
        // Keep this rank's transport until the other waiting member has
        // given up too: destroyed sooner, its liveness probe would end the
        // other's wait with kUnavailable (peer gone) instead of the timeout
        // under test (it did, on a loaded machine).
        RETURN_IF_ERROR(store.Wait({"t/gave_up"}, absl::Seconds(30)));
        return status;
      });
  // Each waiting member times out naming rank 2, unless the other gave up
  // first (then: kAborted naming it); at least one times out.
  const auto timed_out = StatusIs(absl::StatusCode::kDeadlineExceeded,
                                  AllOf(HasSubstr("entry (rank 2) in call 1"),
                                        HasSubstr("same all-reduce calls")));
  for (int rank : {0, 1}) {
    EXPECT_THAT(statuses[rank],
                ::testing::AnyOf(timed_out, StatusIs(absl::StatusCode::kAborted,
                                                     HasSubstr("gave up during its call 1"))))
        << "rank " << rank;
  }
  EXPECT_TRUE(::testing::Matches(timed_out)(statuses[0]) ||
              ::testing::Matches(timed_out)(statuses[1]));
  EXPECT_OK(statuses[2]);
}

TEST(AllReduceGroupTest, BadArgumentsAreRefusedOnTheHostPathToo) {
  ExpectAllOk(RunRankThreads(2, [&](int, rdma::Transport& transport,
                                    rdma::Store& store) -> absl::Status {
    ASSIGN_OR_RETURN(auto group,
                     AllReduceGroup::Create(transport, store, "t", {0, 1}, Options(1024)));
    EXPECT_TRUE(group->direct());
    EXPECT_THAT(group->AllReduce(2, 4, DataType::kFloat32),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("aligned")));
    EXPECT_THAT(group->AllReduce(0, 257, DataType::kFloat32),
                StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("1024 bytes")));
    EXPECT_THAT(group->AllReduce(0, ~size_t{0}, DataType::kFloat64),
                StatusIs(absl::StatusCode::kOutOfRange));
    return group->Shutdown();
  }));
}

// Hierarchical: hosts from AllReduceGroupOptions::host, per rank. Loopback
// maps every peer, so each host's members have direct access.
AllReduceGroupOptions OnHost(size_t capacity, const std::string& host) {
  AllReduceGroupOptions options = Options(capacity);
  options.host = host;
  return options;
}

TEST(AllReduceGroupTest, HierarchicalSumsExactlyOnEveryLayoutOfHosts) {
  using A = AllReduceAlgorithm;
  struct Layout {
    const char* name;
    std::vector<std::string> host_of;  // by rank
  };
  const std::vector<Layout> layouts = {
      {"2x2", {"a", "a", "b", "b"}},
      {"2x2 interleaved", {"a", "b", "a", "b"}},
      {"3+2", {"a", "b", "a", "b", "a"}},
      {"2+1", {"a", "a", "b"}},
      {"2+2+2", {"a", "a", "b", "b", "c", "c"}},
  };
  const std::vector<std::pair<size_t, size_t>> calls = {  // offset, count (floats)
      {0, 1}, {0, 4096}, {0, 4097}, {0, 65537}, {12345, (size_t{1} << 20) + 5}, {3, 2}};
  for (const Layout& layout : layouts) {
    const int world = static_cast<int>(layout.host_of.size());
    SCOPED_TRACE(layout.name);
    ExpectAllOk(RunRankThreads(world, [&](int rank, rdma::Transport& transport,
                                          rdma::Store& store) -> absl::Status {
      ASSIGN_OR_RETURN(auto group,
                       AllReduceGroup::Create(transport, store, "t", AllRanks(world),
                                              OnHost(8 << 20, layout.host_of[rank])));
      if (!group->hierarchical() || group->direct()) {
        return absl::InternalError(absl::StrCat("hierarchical ", group->hierarchical(),
                                                ", direct ", group->direct()));
      }
      for (const auto& [offset, count] : calls) {
        RETURN_IF_ERROR(ReduceAndCheck(*group, world, offset, count, A::kHierarchical));
      }
      return group->Shutdown();
    }));
  }
}

TEST(AllReduceGroupTest, HierarchicalInexactSumsAreBitwiseIdenticalOnEveryRank) {
  const std::vector<std::string> host_of = {"a", "a", "b", "b", "b"};
  ExpectInexactSumsBitwiseIdentical(5, [&](int rank) { return OnHost(1 << 20, host_of[rank]); });
}

TEST(AllReduceGroupTest, OneRankPerHostOrHierarchyOffIsOneFlatRing) {
  for (Hierarchy hierarchy : {Hierarchy::kAuto, Hierarchy::kOff}) {
    const bool shared = hierarchy == Hierarchy::kOff;  // "a a b b", else one rank a host
    SCOPED_TRACE(shared ? "hierarchy off" : "one rank per host");
    ExpectAllOk(RunRankThreads(4, [&](int rank, rdma::Transport& transport,
                                      rdma::Store& store) -> absl::Status {
      AllReduceGroupOptions options =
          OnHost(1 << 20, shared ? std::string(1, "aabb"[rank]) : absl::StrCat("h", rank));
      options.hierarchy = hierarchy;
      ASSIGN_OR_RETURN(auto group,
                       AllReduceGroup::Create(transport, store, "t", AllRanks(4), options));
      if (group->hierarchical() || group->direct() || group->hosts() != (shared ? 2 : 4)) {
        return absl::InternalError(absl::StrCat("hierarchical ", group->hierarchical(),
                                                ", direct ", group->direct(), ", hosts ",
                                                group->hosts()));
      }
      RETURN_IF_ERROR(ReduceAndCheck(*group, 4, 0, 1000, AllReduceAlgorithm::kRing));
      return group->Shutdown();
    }));
  }
}

TEST(AllReduceGroupTest, HierarchicalBadRangeIsRefusedOnEveryMemberWithoutWaiting) {
  ExpectAllOk(RunRankThreads(4, [&](int rank, rdma::Transport& transport,
                                    rdma::Store& store) -> absl::Status {
    ASSIGN_OR_RETURN(auto group, AllReduceGroup::Create(transport, store, "t", AllRanks(4),
                                                        OnHost(1024, rank < 2 ? "a" : "b")));
    EXPECT_THAT(group->AllReduce(2, 4, DataType::kFloat32),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("aligned")));
    EXPECT_THAT(group->AllReduce(0, 257, DataType::kFloat32),
                StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("1024 bytes")));
    // A range may be bad on one member only (each has an offset of its
    // own), so a leader whose host refused a call gives the leaders' call
    // up: the group then fails every call at once, waiting for nobody.
    const absl::Status later = group->AllReduce(0, 256, DataType::kFloat32);
    EXPECT_THAT(later, StatusIs(rank % 2 == 0 ? absl::StatusCode::kFailedPrecondition
                                              : absl::StatusCode::kAborted));
    return rdma::Barrier(store, "t", "judged", 4, absl::Seconds(60));
  }));
}

TEST(AllReduceGroupTest, MembersCreatedWithOtherOptionsAreNamed) {
  std::vector<absl::Status> statuses = RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        AllReduceGroupOptions options = Options(1 << 20);
        if (rank == 1) options.direct = DirectAccess::kOff;
        return AllReduceGroup::Create(transport, store, "t", {0, 1}, options).status();
      });
  EXPECT_THAT(statuses[0], StatusIs(absl::StatusCode::kFailedPrecondition,
                                    AllOf(HasSubstr("rank 1 created it with direct=off"),
                                          HasSubstr("rank 0 with direct=auto"))));
  EXPECT_THAT(statuses[1], StatusIs(absl::StatusCode::kFailedPrecondition,
                                    HasSubstr("rank 0 created it with direct=auto")));
}

TEST(AllReduceGroupTest, AHostWhoseCollectiveFailsFailsTheGroupOnEveryHost) {
  // Hosts {0, 1} and {2, 3}; rank 1's host chunk differs from rank 0's, so
  // host a's collective fails (not a refusal): hosts b's members must not
  // fall back to a flat ring with them, but fail naming them.
  std::vector<absl::Status> statuses = RunRankThreads(
      4, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        AllReduceGroupOptions options = OnHost(1 << 20, rank < 2 ? "a" : "b");
        if (rank == 1) options.host_chunk_bytes = 8 << 10;
        options.ring.timeout = absl::Seconds(20);
        return AllReduceGroup::Create(transport, store, "t", AllRanks(4), options).status();
      });
  for (int rank : {0, 1}) {
    EXPECT_THAT(statuses[rank], StatusIs(absl::StatusCode::kFailedPrecondition))
        << "rank " << rank;
  }
  for (int rank : {2, 3}) {
    EXPECT_THAT(statuses[rank],
                StatusIs(absl::StatusCode::kAborted,
                         HasSubstr("could not set up its host's collective")))
        << "rank " << rank;
  }
}

TEST(AllReduceGroupTest, AResultBufferGetsTheSumOnEveryPath) {
  // One host with direct access (one-shot, scatter-gather), the ring, and
  // two hosts (hierarchical): the caller's input staged in the region, the
  // result in a buffer of its own.
  struct Setup {
    const char* name;
    DirectAccess direct;
    bool two_hosts;
  };
  for (const Setup& setup : {Setup{"host", DirectAccess::kAuto, false},
                             Setup{"ring", DirectAccess::kOff, false},
                             Setup{"hierarchical", DirectAccess::kAuto, true}}) {
    SCOPED_TRACE(setup.name);
    ExpectAllOk(RunRankThreads(4, [&](int rank, rdma::Transport& transport,
                                      rdma::Store& store) -> absl::Status {
      AllReduceGroupOptions options =
          OnHost(1 << 20, setup.two_hosts ? std::string(1, "aabb"[rank]) : "one");
      options.direct = setup.direct;
      ASSIGN_OR_RETURN(auto group,
                       AllReduceGroup::Create(transport, store, "t", AllRanks(4), options));
      for (size_t count : {size_t{1000}, size_t{100001}}) {
        float* staged = reinterpret_cast<float*>(group->data()) + 16;
        for (size_t i = 0; i < count; ++i) staged[i] = Value(rank, i);
        std::vector<float> result(count, -1.0f);
        RETURN_IF_ERROR(group->AllReduce(64, count, DataType::kFloat32, ReduceOp::kSum, 0,
                                         reinterpret_cast<std::byte*>(result.data())));
        for (size_t i = 0; i < count; ++i) {
          float sum = 0;
          for (int r = 0; r < 4; ++r) sum += Value(r, i);
          if (result[i] != sum) {
            return absl::InternalError(absl::StrCat(
                count, " elements (", AlgorithmName(group->last_algorithm()), "): element ", i,
                " is ", result[i], ", expected ", sum));
          }
        }
      }
      // A result buffer inside the region: the host paths refuse it on
      // every member (the peers read the region) and go on; the ring and the
      // hierarchy copy out of the range, wherever the buffer lies.
      float* in = reinterpret_cast<float*>(group->data());
      for (size_t i = 0; i < 10; ++i) in[i] = Value(rank, i);
      std::byte* inside = group->data() + 4096;
      absl::Status status =
          group->AllReduce(0, 10, DataType::kFloat32, ReduceOp::kSum, 0, inside);
      if (group->direct()) {
        EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overlaps")));
      } else {
        RETURN_IF_ERROR(status);
        for (size_t i = 0; i < 10; ++i) {
          float sum = 0;
          for (int r = 0; r < 4; ++r) sum += Value(r, i);
          if (reinterpret_cast<float*>(inside)[i] != sum) {
            return absl::InternalError(absl::StrCat("inside the region: element ", i));
          }
        }
      }
      RETURN_IF_ERROR(ReduceAndCheck(*group, 4, 0, 100, group->Choose(400)));
      return group->Shutdown();
    }));
  }
}

TEST(AllReduceGroupTest, ALeaderWhoseRingFailsReleasesItsHostAtOnce) {
  // Hosts {0, 1} and {2, 3}; rank 3 never calls. Rank 2 (host b's leader)
  // times out in its host's reduce and gives the leaders' call up; rank 0
  // (host a's leader) then fails in the leaders' ring at once (kAborted
  // naming rank 2), and rank 1, waiting for rank 0's broadcast, fails at
  // once naming rank 0 instead of timing out in turn.
  std::vector<absl::Status> calls(4);
  std::vector<absl::Duration> took(4);
  std::vector<absl::Status> statuses = RunRankThreads(
      4, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        AllReduceGroupOptions options = OnHost(1 << 20, rank < 2 ? "a" : "b");
        // Rank 1 would wait far longer than the others: only rank 0's
        // word can end its call in time; and rank 0 longer than rank 2:
        // only rank 2's abort can end its call first.
        options.ring.timeout = rank == 1   ? absl::Seconds(60)
                               : rank == 0 ? absl::Seconds(5)
                                           : absl::Seconds(1);
        options.ring.liveness_interval = absl::Milliseconds(50);
        ASSIGN_OR_RETURN(auto group,
                         AllReduceGroup::Create(transport, store, "t", AllRanks(4), options));
        if (rank != 3) {
          const absl::Time start = absl::Now();
          calls[rank] = group->AllReduce(0, 1000, DataType::kFloat32);
          took[rank] = absl::Now() - start;
        }
        // The hosts' barriers outlast the others' timeouts (the leaders'
        // ring, which failed, ends its shutdown with its error).
        return group->Shutdown(absl::Seconds(5));
      });
  EXPECT_OK(statuses[1]);
  EXPECT_OK(statuses[3]);
  EXPECT_THAT(calls[2], StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("rank 3")));
  EXPECT_THAT(calls[0], StatusIs(absl::StatusCode::kAborted, HasSubstr("rank 2")));
  EXPECT_THAT(calls[1], StatusIs(absl::StatusCode::kAborted,
                                 HasSubstr("rank 0 gave up during its call 2")));
}

TEST(AllReduceGroupTest, AStalledLeaderWritesNothingIntoTheMembersThatGaveUp) {
  // Hosts {0, 1} and {2, 3}; rank 2, host b's leader, stalls: it calls
  // only once the other three have given up. Its late call (its host's
  // reduce, the leaders' ring, the broadcast) must leave their data as it
  // was when their calls failed.
  constexpr size_t kCount = 1000;
  std::vector<absl::Status> calls(4);
  std::vector<std::vector<float>> at_give_up(4), after_straggler(4);
  std::atomic<bool> straggler_done{false};
  std::vector<absl::Status> statuses = RunRankThreads(
      4, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        AllReduceGroupOptions options = OnHost(1 << 20, rank < 2 ? "a" : "b");
        options.ring.timeout = absl::Seconds(1);
        options.ring.liveness_interval = absl::Milliseconds(50);
        ASSIGN_OR_RETURN(auto group,
                         AllReduceGroup::Create(transport, store, "t", AllRanks(4), options));
        auto* data = reinterpret_cast<float*>(group->data());
        std::fill(data, data + kCount, static_cast<float>(rank + 1));
        if (rank == 2) {
          RETURN_IF_ERROR(store.Wait({"t/gave_up"}, absl::Seconds(30)));
          calls[2] = group->AllReduce(0, kCount, DataType::kFloat32);
          straggler_done = true;
          return absl::OkStatus();
        }
        calls[rank] = group->AllReduce(0, kCount, DataType::kFloat32);
        at_give_up[rank].assign(data, data + kCount);
        ASSIGN_OR_RETURN(int64_t gone, store.Add("t/gone", 1));
        if (gone == 3) RETURN_IF_ERROR(store.Set("t/gave_up", "1"));
        // The group (and its regions) stays while the straggler runs.
        const absl::Time deadline = absl::Now() + absl::Seconds(30);
        while (!straggler_done && absl::Now() < deadline) {
          RETURN_IF_ERROR(transport.Progress().status());
          std::this_thread::yield();
        }
        after_straggler[rank].assign(data, data + kCount);
        return absl::OkStatus();
      });
  for (const absl::Status& status : statuses) EXPECT_OK(status);
  EXPECT_TRUE(straggler_done);
  EXPECT_THAT(calls[0], StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("rank 2")));
  EXPECT_THAT(calls[3], StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("rank 2")));
  EXPECT_FALSE(calls[1].ok());
  // The straggler learns at once that its host's member gave up.
  EXPECT_THAT(calls[2], StatusIs(absl::StatusCode::kAborted, HasSubstr("rank 3 gave up")));
  for (int rank : {0, 1, 3}) {
    EXPECT_EQ(after_straggler[rank], at_give_up[rank])
        << "the stalled leader's late call changed rank " << rank << "'s data";
  }
}

}  // namespace
}  // namespace rdmaflow::collectives

namespace rdmaflow::collectives {
namespace {

// A buffer of the caller's own memory meets ranges in the region on the
// host paths; on several hosts it is refused at once, naming why.
TEST(AllReduceGroupTest, BuffersOutsideTheRegionOnTheHostPathsOnly) {
  ExpectAllOk(RunRankThreads(3, [&](int rank, rdma::Transport& transport,
                                    rdma::Store& store) -> absl::Status {
    ASSIGN_OR_RETURN(auto group,
                     AllReduceGroup::Create(transport, store, "t", AllRanks(3), Options(1 << 20)));
    if (!group->external()) {
      return absl::InternalError(absl::StrCat("no external reads: ", group->external_refusal()));
    }
    for (size_t count : {size_t{1000}, size_t{20000}}) {  // one-shot, scatter-gather
      std::vector<float> own(count);
      float* values = rank == 1 ? reinterpret_cast<float*>(group->data()) : own.data();
      for (size_t i = 0; i < count; ++i) values[i] = Value(rank, i);
      RETURN_IF_ERROR(rank == 1 ? group->AllReduce(0, count, DataType::kFloat32)
                                : group->AllReduceExternal(
                                      reinterpret_cast<std::byte*>(own.data()), count,
                                      DataType::kFloat32));
      const AllReduceAlgorithm expected = count * 4 <= (16 << 10)
                                              ? AllReduceAlgorithm::kHostOneShot
                                              : AllReduceAlgorithm::kHostScatterGather;
      if (group->last_algorithm() != expected) {
        return absl::InternalError(AlgorithmName(group->last_algorithm()));
      }
      for (size_t i = 0; i < count; ++i) {
        const float sum = Value(0, i) + Value(1, i) + Value(2, i);
        if (values[i] != sum) {
          return absl::InternalError(absl::StrCat(count, " elements: element ", i, " is ",
                                                  values[i], ", expected ", sum));
        }
      }
    }
    return group->Shutdown();
  }));
  ExpectAllOk(RunRankThreads(2, [&](int rank, rdma::Transport& transport,
                                    rdma::Store& store) -> absl::Status {
    ASSIGN_OR_RETURN(auto group, AllReduceGroup::Create(transport, store, "t", AllRanks(2),
                                                        OnHost(1 << 20, absl::StrCat("h", rank))));
    std::vector<float> own(10, 1.0f);
    absl::Status status = group->AllReduceExternal(reinterpret_cast<std::byte*>(own.data()),
                                                   own.size(), DataType::kFloat32);
    if (group->external() || !absl::IsFailedPrecondition(status) ||
        !absl::StrContains(status.message(), "several hosts")) {
      return absl::InternalError(absl::StrCat("got ", status.ToString()));
    }
    return group->Shutdown();
  }));
}

}  // namespace
}  // namespace rdmaflow::collectives
