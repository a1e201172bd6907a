// File: ring_allreduce_test.cc
// The ring all-reduce over loopback transports, ranks as threads: exact sums
// (integers in float32) for 1-8 ranks and sizes from one element to 64 MiB,
// identical on every rank; half precision; flow control with tiny slots;
// and the errors users meet.
#include "collectives/ring_allreduce.h"

#include <cstring>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "rdma/rendezvous.h"
#include "rdma/testing/rank_threads.h"

namespace rdmaflow::collectives {
namespace {

using ::rdmaflow::rdma::testing::RunRankThreads;
using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

float Value(int rank, size_t i) {
  return static_cast<float>((i * 7 + static_cast<size_t>(rank) * 13) % 1024);
}

// Each rank fills [offset, offset + count) with Value(), reduces, and checks
// every element against the exact sum.
absl::Status ReduceAndCheck(RingAllReduce& ring, int world, size_t offset_elems,
                            size_t count) {
  float* data = reinterpret_cast<float*>(ring.data()) + offset_elems;
  const int rank = ring.rank();
  for (size_t i = 0; i < count; ++i) data[i] = Value(rank, i);
  RETURN_IF_ERROR(ring.AllReduce(offset_elems * 4, count, DataType::kFloat32));
  for (size_t i = 0; i < count; ++i) {
    float expected = 0;
    for (int r = 0; r < world; ++r) expected += Value(r, i);
    if (data[i] != expected) {
      return absl::InternalError(absl::StrCat("rank ", rank, ", ", count,
                                              " elements: element ", i, " is ",
                                              data[i], ", expected ", expected));
    }
  }
  return absl::OkStatus();
}

void ExpectAllOk(const std::vector<absl::Status>& statuses) {
  for (size_t r = 0; r < statuses.size(); ++r) {
    EXPECT_OK(statuses[r]) << "rank " << r;
  }
}

std::vector<int> AllRanks(int world) {
  std::vector<int> members(world);
  std::iota(members.begin(), members.end(), 0);
  return members;
}

TEST(RingAllReduceTest, ExactSumsForOneToEightRanks) {
  const std::vector<size_t> counts = {1, 2, 3, 1023, 65537, (size_t{1} << 20) + 5};
  for (int world = 1; world <= 8; ++world) {
    SCOPED_TRACE(absl::StrCat(world, " ranks"));
    ExpectAllOk(RunRankThreads(world, [&](int, rdma::Transport& transport,
                                          rdma::Store& store) -> absl::Status {
      RingAllReduceOptions options;
      options.capacity_bytes = 8 << 20;
      options.chunk_bytes = 64 << 10;
      ASSIGN_OR_RETURN(auto ring, RingAllReduce::Create(transport, store, "t",
                                                        AllRanks(world), options));
      // One ring, many calls: sequence numbers and credits carry over.
      for (size_t count : counts) RETURN_IF_ERROR(ReduceAndCheck(*ring, world, 0, count));
      // At an offset too.
      RETURN_IF_ERROR(ReduceAndCheck(*ring, world, 12345, 999));
      return ring->Shutdown();
    }));
  }
}

TEST(RingAllReduceTest, ExactSumsWhereFlagsFollowTheirPiecesWithoutAFlush) {
  // Endpoints that place their writes in post order (UCX over one TCP
  // connection): each piece's flag goes behind it on the data lane.
  rdma::testing::RankThreadsOptions ordered;
  ordered.orders_writes = true;
  for (int world : {2, 3, 5}) {
    SCOPED_TRACE(absl::StrCat(world, " ranks"));
    ExpectAllOk(RunRankThreads(
        world,
        [&](int, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
          RingAllReduceOptions options;
          options.capacity_bytes = 8 << 20;
          options.chunk_bytes = 64 << 10;
          options.slots = 4;  // the window fills: credits pace the pieces
          ASSIGN_OR_RETURN(auto ring, RingAllReduce::Create(transport, store, "t",
                                                            AllRanks(world), options));
          for (size_t count : {size_t{1}, size_t{65537}, (size_t{1} << 20) + 5}) {
            RETURN_IF_ERROR(ReduceAndCheck(*ring, world, 0, count));
          }
          RETURN_IF_ERROR(ReduceAndCheck(*ring, world, 12345, 999));
          return ring->Shutdown();
        },
        ordered));
  }
}

TEST(RingAllReduceTest, StagingIsBoundedByWhatACallCanFill) {
  // 4 ranks, 16 KiB: segments of 4 KiB, one 4 KiB piece each, so a call
  // has 3 reduce-scatter messages per link and 3 slots are all it can use;
  // a larger region keeps the slots asked for.
  struct Case {
    size_t capacity;
    int slots;
    int expected;
  };
  for (const Case& c : {Case{16 << 10, 32, 3}, Case{16 << 10, 2, 2},
                        Case{(16 << 10) + 1, 32, 6}, Case{1 << 20, 32, 32}}) {
    SCOPED_TRACE(absl::StrCat(c.capacity, " bytes, ", c.slots, " slots"));
    ExpectAllOk(RunRankThreads(4, [&](int, rdma::Transport& transport,
                                      rdma::Store& store) -> absl::Status {
      RingAllReduceOptions options;
      options.capacity_bytes = c.capacity;
      options.chunk_bytes = 4 << 10;
      options.slots = c.slots;
      ASSIGN_OR_RETURN(auto ring, RingAllReduce::Create(transport, store, "t",
                                                        AllRanks(4), options));
      if (ring->staging_slots() != c.expected) {
        return absl::InternalError(absl::StrCat("staging slots ", ring->staging_slots(),
                                                ", expected ", c.expected));
      }
      RETURN_IF_ERROR(ReduceAndCheck(*ring, 4, 0, c.capacity / 4));
      RETURN_IF_ERROR(ReduceAndCheck(*ring, 4, 0, 7));
      return ring->Shutdown();
    }));
  }
}

TEST(RingAllReduceTest, SixtyFourMebibytesUneven) {
  // 2^24 - 1 floats: not divisible by 2, 6 or 8.
  const size_t count = (size_t{64} << 20) / 4 - 1;
  for (int world : {2, 6, 8}) {
    SCOPED_TRACE(absl::StrCat(world, " ranks"));
    ExpectAllOk(RunRankThreads(world, [&](int, rdma::Transport& transport,
                                          rdma::Store& store) -> absl::Status {
      RingAllReduceOptions options;
      options.capacity_bytes = size_t{64} << 20;
      ASSIGN_OR_RETURN(auto ring, RingAllReduce::Create(transport, store, "t",
                                                        AllRanks(world), options));
      RETURN_IF_ERROR(ReduceAndCheck(*ring, world, 0, count));
      return ring->Shutdown();
    }));
  }
}

TEST(RingAllReduceTest, TinySlotsExerciseFlowControl) {
  for (int slots : {1, 2, 3}) {
    SCOPED_TRACE(absl::StrCat(slots, " slots"));
    ExpectAllOk(RunRankThreads(4, [&](int, rdma::Transport& transport,
                                      rdma::Store& store) -> absl::Status {
      RingAllReduceOptions options;
      options.capacity_bytes = 1 << 16;
      options.chunk_bytes = 64;
      options.slots = slots;
      ASSIGN_OR_RETURN(auto ring, RingAllReduce::Create(transport, store, "t",
                                                        AllRanks(4), options));
      for (int call = 0; call < 5; ++call) {
        RETURN_IF_ERROR(ReduceAndCheck(*ring, 4, 0, 1000 + call * 37));
      }
      return ring->Shutdown();
    }));
  }
}

// All-gather pieces bound past gather_in_slots_from go through the staging
// slots: calls below, across and past the boundary still sum exactly; a
// member created with another boundary is refused by name.
TEST(RingAllReduceTest, AllGatherThroughSlotsPastTheBoundarySumsTheSame) {
  ExpectAllOk(RunRankThreads(3, [&](int rank, rdma::Transport& transport,
                                    rdma::Store& store) -> absl::Status {
    RingAllReduceOptions options;
    options.capacity_bytes = 64 << 10;
    options.chunk_bytes = 256;
    options.slots = 4;
    options.gather_in_slots_from = 32 << 10;
    ASSIGN_OR_RETURN(auto ring,
                     RingAllReduce::Create(transport, store, "t", AllRanks(3), options));
    RETURN_IF_ERROR(ReduceAndCheck(*ring, 3, 0, 1000));              // below
    RETURN_IF_ERROR(ReduceAndCheck(*ring, 3, 7000, 3000));           // across
    RETURN_IF_ERROR(ReduceAndCheck(*ring, 3, (32 << 10) / 4, 4001));  // past
    RETURN_IF_ERROR(ring->Shutdown());
    options.name = "other";
    if (rank == 1) options.gather_in_slots_from = 16 << 10;
    absl::StatusOr<std::unique_ptr<RingAllReduce>> other =
        RingAllReduce::Create(transport, store, "t", AllRanks(3), options);
    EXPECT_THAT(other, StatusIs(absl::StatusCode::kFailedPrecondition,
                                HasSubstr("gather_in_slots_from")));
    return absl::OkStatus();
  }));
}

TEST(RingAllReduceTest, SubgroupInAnyOrder) {
  // Ranks 3, 0, 2 form a ring; rank 1 is not in it.
  ExpectAllOk(RunRankThreads(4, [&](int rank, rdma::Transport& transport,
                                    rdma::Store& store) -> absl::Status {
    if (rank == 1) return absl::OkStatus();
    RingAllReduceOptions options;
    options.capacity_bytes = 1 << 20;
    ASSIGN_OR_RETURN(auto ring,
                     RingAllReduce::Create(transport, store, "t", {3, 0, 2}, options));
    float* data = reinterpret_cast<float*>(ring->data());
    for (int i = 0; i < 1000; ++i) data[i] = static_cast<float>(rank * 1000 + i);
    RETURN_IF_ERROR(ring->AllReduce(0, 1000, DataType::kFloat32, ReduceOp::kMax));
    for (int i = 0; i < 1000; ++i) {
      if (data[i] != 3000 + i) return absl::InternalError(absl::StrCat("max at ", i, ": ", data[i]));
    }
    return ring->Shutdown();
  }));
}

TEST(RingAllReduceTest, HalfPrecisionSums) {
  for (DataType type : {DataType::kFloat16, DataType::kBFloat16}) {
    SCOPED_TRACE(DataTypeName(type));
    ExpectAllOk(RunRankThreads(4, [&](int rank, rdma::Transport& transport,
                                      rdma::Store& store) -> absl::Status {
      RingAllReduceOptions options;
      options.capacity_bytes = 1 << 20;
      options.chunk_bytes = 256;
      ASSIGN_OR_RETURN(auto ring, RingAllReduce::Create(transport, store, "t",
                                                        AllRanks(4), options));
      auto to = type == DataType::kFloat16 ? FloatToHalf : FloatToBFloat16;
      auto from = type == DataType::kFloat16 ? HalfToFloat : BFloat16ToFloat;
      uint16_t* data = reinterpret_cast<uint16_t*>(ring->data());
      const size_t count = 10001;
      // Sums up to 4 * 63 = 252: exact in both formats.
      for (size_t i = 0; i < count; ++i) data[i] = to(static_cast<float>((i + rank) % 64));
      RETURN_IF_ERROR(ring->AllReduce(0, count, type));
      for (size_t i = 0; i < count; ++i) {
        float expected = 0;
        for (int r = 0; r < 4; ++r) expected += static_cast<float>((i + r) % 64);
        if (from(data[i]) != expected) {
          return absl::InternalError(absl::StrCat("element ", i, ": ", from(data[i])));
        }
      }
      return ring->Shutdown();
    }));
  }
}

TEST(RingAllReduceTest, BadArgumentsAreRefusedByName) {
  ExpectAllOk(RunRankThreads(2, [&](int rank, rdma::Transport& transport,
                                    rdma::Store& store) -> absl::Status {
    RingAllReduceOptions options;
    options.capacity_bytes = 1024;
    EXPECT_THAT(RingAllReduce::Create(transport, store, "bad", {0, 0}, options).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("distinct")));
    EXPECT_THAT(RingAllReduce::Create(transport, store, "bad", {1 - rank + 5}, options)
                    .status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("not among its members")));
    RingAllReduceOptions no_room = options;
    no_room.capacity_bytes = 0;
    EXPECT_THAT(RingAllReduce::Create(transport, store, "bad", {0, 1}, no_room).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("capacity")));
    // A refused range gives the call up (each member has an offset of its
    // own, so it may be refused on one only): the ring is unusable after.
    ASSIGN_OR_RETURN(auto ring, RingAllReduce::Create(transport, store, "t", {0, 1}, options));
    EXPECT_THAT(ring->AllReduce(2, 4, DataType::kFloat32),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("multiple")));
    EXPECT_THAT(ring->AllReduce(0, 4, DataType::kFloat32),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("unusable")));
    ASSIGN_OR_RETURN(auto other, RingAllReduce::Create(transport, store, "t2", {0, 1}, options));
    EXPECT_THAT(other->AllReduce(0, 257, DataType::kFloat32),
                StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("1024-byte")));
    ASSIGN_OR_RETURN(auto empty, RingAllReduce::Create(transport, store, "t3", {0, 1}, options));
    EXPECT_THAT(empty->AllReduce(1028, 0, DataType::kFloat32),
                StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("1024-byte")));
    return rdma::Barrier(store, "bad", "judged", 2, absl::Seconds(60));
  }));
}

TEST(RingAllReduceTest, MismatchedOptionsAreNamed) {
  std::vector<absl::Status> statuses = RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        RingAllReduceOptions options;
        options.capacity_bytes = rank == 0 ? 1024 : 2048;
        options.timeout = absl::Seconds(10);
        return RingAllReduce::Create(transport, store, "t", {0, 1}, options).status();
      });
  for (const absl::Status& status : statuses) {
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kFailedPrecondition,
                                 HasSubstr("same options")));
  }
}

TEST(RingAllReduceTest, AMemberThatNeverCallsIsATimeoutNotAHang) {
  // Also with liveness probes every 50 ms: their completions (the member
  // is alive) are not progress of the all-reduce.
  for (absl::Duration probes : {absl::Seconds(1), absl::Milliseconds(50)}) {
    SCOPED_TRACE(absl::FormatDuration(probes));
    const std::string ns = absl::StrCat("t", absl::ToInt64Milliseconds(probes));
    std::vector<absl::Status> statuses = RunRankThreads(
        3, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
          RingAllReduceOptions options;
          options.capacity_bytes = 4096;
          options.timeout = absl::Milliseconds(500);
          options.liveness_interval = probes;
          ASSIGN_OR_RETURN(auto ring, RingAllReduce::Create(transport, store, ns,
                                                            AllRanks(3), options));
          if (rank == 2) {
            // Skips the call, then waits on the store until the others gave up.
            return store.Wait({ns + "/gave_up"}, absl::Seconds(30));
          }
          absl::Status status = ring->AllReduce(0, 1000, DataType::kFloat32);
          ASSIGN_OR_RETURN(int64_t gave_up, store.Add(ns + "/count", 1));
          if (gave_up == 2) RETURN_IF_ERROR(store.Set(ns + "/gave_up", "1"));
          // Keeps this transport until both gave up: one destroyed sooner
          // ends the other's wait on it with "peer gone" (its probes fail).
          RETURN_IF_ERROR(store.Wait({ns + "/gave_up"}, absl::Seconds(30)));
          return status;
        });
    EXPECT_THAT(statuses[0], StatusIs(absl::StatusCode::kDeadlineExceeded,
                                      HasSubstr("from rank 2")));
    EXPECT_THAT(statuses[1], StatusIs(absl::StatusCode::kDeadlineExceeded));
    EXPECT_OK(statuses[2]);
  }
}

TEST(RingAllReduceTest, EachMemberReducesAtAnOffsetOfItsOwn) {
  // A staged tensor on one member meets a registered one elsewhere on
  // another: each member's range lies where it says (its call descriptor),
  // some members' past gather_in_slots_from (their all-gather pieces come
  // through the slots), the others' not (written straight into them).
  // Empty calls in between take part like any other.
  for (int world : {2, 3, 5}) {
    SCOPED_TRACE(absl::StrCat(world, " ranks"));
    ExpectAllOk(RunRankThreads(world, [&](int rank, rdma::Transport& transport,
                                          rdma::Store& store) -> absl::Status {
      RingAllReduceOptions options;
      options.capacity_bytes = 1 << 20;
      options.chunk_bytes = 4 << 10;
      options.slots = 4;
      options.gather_in_slots_from = 256 << 10;
      ASSIGN_OR_RETURN(auto ring, RingAllReduce::Create(transport, store, "own",
                                                        AllRanks(world), options));
      const size_t count = 20001;
      for (int round = 0; round < 3; ++round) {
        const size_t offset = (rank + round) % 2 == 0 ? 7 * rank : (80 << 10) + 3 * rank;
        RETURN_IF_ERROR(ReduceAndCheck(*ring, world, offset, count));
        RETURN_IF_ERROR(ring->AllReduce(4 * rank, 0, DataType::kFloat32));
      }
      return ring->Shutdown();
    }));
  }
}

// A ring of `world` members (64 KiB, 1 KiB chunks, a 60 s timeout, so that
// a failure by timeout shows as kDeadlineExceeded) after one good call.
absl::StatusOr<std::unique_ptr<RingAllReduce>> RingAfterAGoodCall(rdma::Transport& transport,
                                                                 rdma::Store& store,
                                                                 const std::string& ns,
                                                                 int world) {
  RingAllReduceOptions options;
  options.capacity_bytes = 64 << 10;
  options.chunk_bytes = 1024;
  options.timeout = absl::Seconds(60);
  ASSIGN_OR_RETURN(auto ring, RingAllReduce::Create(transport, store, ns, AllRanks(world),
                                                    options));
  RETURN_IF_ERROR(ReduceAndCheck(*ring, world, 0, 1000));
  return ring;
}

TEST(RingAllReduceTest, ARangeRefusedOnOneMemberFailsTheOthersAtOnce) {
  // The last member's offset passes its region's end: it refuses the call,
  // and the others, already in it, fail it with kAborted well before their
  // 60 s timeout instead of waiting (or pairing it with its next call).
  for (int world : {2, 4}) {
    SCOPED_TRACE(absl::StrCat(world, " ranks"));
    const std::string ns = absl::StrCat("refused", world);
    std::vector<absl::Status> calls(world);
    ExpectAllOk(RunRankThreads(world, [&](int rank, rdma::Transport& transport,
                                          rdma::Store& store) -> absl::Status {
      ASSIGN_OR_RETURN(auto ring, RingAfterAGoodCall(transport, store, ns, world));
      const size_t offset = rank == world - 1 ? (64 << 10) - 8 : 0;
      calls[rank] = ring->AllReduce(offset, 1000, DataType::kFloat32);
      return rdma::Barrier(store, ns, "judged", world, absl::Seconds(60));
    }));
    EXPECT_THAT(calls[world - 1], StatusIs(absl::StatusCode::kOutOfRange));
    for (int rank = 0; rank + 1 < world; ++rank) {
      EXPECT_THAT(calls[rank], StatusIs(absl::StatusCode::kAborted, HasSubstr("gave up call 1")))
          << "rank " << rank;
    }
  }
}

TEST(RingAllReduceTest, CallsThatDifferFailEveryMemberAndNameBoth) {
  // The last member's call differs from the others' in one way; every
  // member fails the call with kAborted at once (a timeout would be
  // kDeadlineExceeded), the two that compared the calls name both, and the
  // ring is unusable afterwards.
  struct Case {
    const char* what;
    size_t count;
    DataType type;
    ReduceOp op;
    uint8_t variant;
    const char* theirs;
  };
  const Case cases[] = {
      {"count", 999, DataType::kFloat32, ReduceOp::kSum, 0, "count 999, float32 sum"},
      {"empty", 0, DataType::kFloat32, ReduceOp::kSum, 0, "count 0, float32 sum"},
      {"type", 1000, DataType::kInt32, ReduceOp::kSum, 0, "count 1000, int32 sum"},
      {"op", 1000, DataType::kFloat32, ReduceOp::kMax, 0, "count 1000, float32 max"},
      {"variant", 1000, DataType::kFloat32, ReduceOp::kSum, 1, "float32 sum, variant 1"},
  };
  for (int world : {2, 4}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(absl::StrCat(world, " ranks, another ", c.what));
      const std::string ns = absl::StrCat("differ", world, c.what);
      std::vector<absl::Status> calls(world), again(world);
      ExpectAllOk(RunRankThreads(world, [&](int rank, rdma::Transport& transport,
                                            rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto ring, RingAfterAGoodCall(transport, store, ns, world));
        const bool odd = rank == world - 1;
        calls[rank] = odd ? ring->AllReduce(0, c.count, c.type, c.op, c.variant)
                          : ring->AllReduce(0, 1000, DataType::kFloat32);
        again[rank] = ring->AllReduce(0, 1000, DataType::kFloat32);
        // No Shutdown (its barrier is for healthy rings); the transports
        // stay until every member has its errors.
        return rdma::Barrier(store, ns, "judged", world, absl::Seconds(60));
      }));
      int named = 0;
      for (int rank = 0; rank < world; ++rank) {
        EXPECT_THAT(calls[rank], StatusIs(absl::StatusCode::kAborted)) << "rank " << rank;
        const std::string message(calls[rank].message());
        if (message.find("differs between neighbours") != std::string::npos) {
          ++named;
          EXPECT_THAT(message, HasSubstr("call 1 differs"));
          EXPECT_THAT(message, HasSubstr(c.theirs));
          EXPECT_THAT(message, HasSubstr("count 1000, float32 sum)"));
        } else {
          EXPECT_THAT(message, HasSubstr("gave up call 1"));
        }
        EXPECT_THAT(again[rank], StatusIs(absl::StatusCode::kFailedPrecondition,
                                          HasSubstr("unusable")));
      }
      // The odd member or its left neighbour compared the calls (the other
      // may hear of it first: then it gave up on the abort).
      EXPECT_GE(named, 1);
    }
  }
}

}  // namespace
}  // namespace rdmaflow::collectives
