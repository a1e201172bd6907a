// File: moshpit_group_test.cc
// Moshpit's group formation through the store (moshpit_group.h): full,
// shrunk by a missing peer, a late peer alone, the last expected member
// sealing without polling; and what a store writer can forge: seals that
// do not parse, list tickets twice or beyond those taken, ids outside the
// world or twice, this peer's ticket as another's; a member killed between
// its ticket and its record left out; a sealer killed before its seal
// leaving everyone alone. Torch-free, so it runs under the sanitizers with
// the other hostile tests.
#include "strategies/moshpit/moshpit_group.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/store.h"
#include "rdma/testing/in_memory_store.h"

namespace rdmaflow::strategies::moshpit {
namespace {

using ::rdmaflow::testing::StatusIs;

std::vector<int> Ids(const std::vector<GroupMember>& members) {
  std::vector<int> ids;
  for (const GroupMember& m : members) ids.push_back(m.id);
  return ids;
}

TEST(FormGroupTest, FullShrunkAndLate) {
  rdma::testing::InMemoryStore store;
  std::vector<std::vector<GroupMember>> got(4);
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      ASSERT_OK_AND_ASSIGN(got[r], FormGroup(store, "full", r * 10, absl::StrCat("n", r), 4,
                                             /*world=*/40, absl::Seconds(30)));
    });
  }
  for (auto& t : threads) t.join();
  const std::vector<GroupMember> full = {{0, "n0"}, {10, "n1"}, {20, "n2"}, {30, "n3"}};
  for (int r = 0; r < 4; ++r) EXPECT_EQ(got[r], full);
  // Three of four come: after the timeout the three form the group; the
  // fourth, arriving after the seal, is alone. (The timeout leaves the
  // three threads seconds to take their tickets on a loaded machine.)
  threads.clear();
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      ASSERT_OK_AND_ASSIGN(got[r], FormGroup(store, "shrunk", r, "", 4, 4, absl::Seconds(2)));
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) EXPECT_EQ(Ids(got[r]), (std::vector<int>{0, 1, 2}));
  ASSERT_OK_AND_ASSIGN(got[3], FormGroup(store, "shrunk", 3, "", 4, 4, absl::Seconds(30)));
  EXPECT_EQ(Ids(got[3]), (std::vector<int>{3}));
  EXPECT_THAT(FormGroup(store, "bad", 0, "a b", 1, 1, absl::Seconds(1)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("spaces")));
  EXPECT_THAT(FormGroup(store, "bad", 4, "", 1, 4, absl::Seconds(1)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("outside")));
}

// Counts one peer's calls into a store shared with others.
class CountingStore final : public rdma::Store {
 public:
  explicit CountingStore(rdma::Store& store) : store_(store) {}
  absl::Status Set(absl::string_view key, absl::string_view value) override {
    ++calls;
    return store_.Set(key, value);
  }
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override {
    ++calls;
    return store_.Get(key, timeout);
  }
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override {
    ++calls;
    return store_.Wait(keys, timeout);
  }
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override {
    ++calls;
    return store_.Add(key, delta);
  }
  int calls = 0;

 private:
  rdma::Store& store_;
};

// Each store call is a round trip on the round's critical path: the peer
// that takes the last expected ticket seals without polling, and nobody
// reads back what it wrote (its own record, the sealer's count).
TEST(FormGroupTest, TheLastToArriveSealsAtOnce) {
  rdma::testing::InMemoryStore shared;
  std::vector<GroupMember> first_got;
  std::thread first([&] {
    // It expects a third member, so only the second can seal by count.
    ASSERT_OK_AND_ASSIGN(first_got, FormGroup(shared, "g", 7, "a", 3, 8, absl::Seconds(30)));
  });
  // Join once the first has its ticket (bounded: its Add is its first call).
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (true) {
    ASSERT_OK_AND_ASSIGN(int64_t taken, shared.Add("g/count", 0));
    if (taken >= 1) break;
    ASSERT_LT(absl::Now(), deadline) << "the first peer never took its ticket";
    std::this_thread::yield();
  }
  CountingStore mine(shared);
  ASSERT_OK_AND_ASSIGN(std::vector<GroupMember> got,
                       FormGroup(mine, "g", 3, "b", 2, 8, absl::Seconds(30)));
  first.join();
  const std::vector<GroupMember> both = {{3, "b"}, {7, "a"}};
  EXPECT_EQ(got, both);
  EXPECT_EQ(first_got, both);
  // Ticket, record, seal, the count it seals, the other's record, closing
  // the group, the seal.
  EXPECT_EQ(mine.calls, 7);
}

// The seal is written by a peer: one that does not parse, lists a ticket
// twice or beyond those taken, an id outside the world or twice, or this
// peer's own ticket as someone else's, is refused.
TEST(FormGroupTest, AForgedSealIsRefused) {
  for (const char* forged : {"0", "-3", "4000000000", "many", "1 0 \n1 0 ", "2 5 x",
                             "1 0 \n2 9 ", "1 0 \n2 -1 ", "2 1 x", "1 1 \n3 2 ", "1 0 a b",
                             "1 0 \n2 0 "}) {
    rdma::testing::InMemoryStore store;
    const std::string prefix = absl::StrCat("forged", forged);
    ASSERT_OK(store.Add(prefix + "/count", 1).status());  // someone else's ticket 1
    ASSERT_OK(store.Add(prefix + "/seal", 1).status());
    ASSERT_OK(store.Set(prefix + "/final", forged));
    // This peer takes ticket 2; ids below 4.
    EXPECT_THAT(FormGroup(store, prefix, 0, "", 3, 4, absl::Seconds(30)).status(),
                StatusIs(absl::StatusCode::kDataLoss, ::testing::HasSubstr("bad seal")))
        << forged;
  }
}

// A peer that took its ticket and died before writing its record leaves
// the group, instead of ending the round for everyone in it.
TEST(FormGroupTest, AMemberDeadBetweenItsTicketAndItsRecordIsLeftOut) {
  rdma::testing::InMemoryStore store;
  ASSERT_OK(store.Add("g/count", 1).status());  // ticket 1, and no record ever
  std::vector<std::vector<GroupMember>> got(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      ASSERT_OK_AND_ASSIGN(got[r], FormGroup(store, "g", r + 1, "", 3, 4,
                                             absl::Seconds(1)));
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) EXPECT_EQ(Ids(got[r]), (std::vector<int>{1, 2})) << r;
  // Bounded by the group's timeout and its grace, not by a fixed minute:
  // the 60 s waits of before ran past this small test's timeout.
}

// A record that does not parse, and a stale one repeating a member's id (a
// restarted rank's old incarnation): left out of the seal, not fatal.
TEST(FormGroupTest, AMalformedOrRepeatedRecordIsLeftOut) {
  rdma::testing::InMemoryStore store;
  ASSERT_OK(store.Add("g/count", 2).status());
  ASSERT_OK(store.Set("g/member/1", "not a record"));
  ASSERT_OK(store.Set("g/member/2", "3 old"));
  // Rank 3 joins with ticket 3 and seals (3 expected): its own line wins
  // over the stale one.
  ASSERT_OK_AND_ASSIGN(std::vector<GroupMember> got,
                       FormGroup(store, "g", 3, "new", 3, 4, absl::Seconds(30)));
  EXPECT_EQ(got, (std::vector<GroupMember>{{3, "new"}}));
  ASSERT_OK_AND_ASSIGN(std::string seal, store.Get("g/final", absl::Seconds(1)));
  EXPECT_EQ(seal, "3 3 new\n");
}

// A sealer slower than its waiters' patience: a waiter that gave up closed
// the group first, so the sealer writes an empty seal and is alone too;
// nobody holds a list the others do not.
TEST(FormGroupTest, ASealerFindingTheGroupClosedSealsEveryoneAlone) {
  rdma::testing::InMemoryStore store;
  ASSERT_OK(store.Add("g/count", 1).status());
  ASSERT_OK(store.Set("g/member/1", "1 a"));
  ASSERT_OK(store.Add("g/closed", 1).status());  // ticket 1's holder gave up
  // Ticket 2, the last expected: this peer seals.
  ASSERT_OK_AND_ASSIGN(std::vector<GroupMember> got,
                       FormGroup(store, "g", 0, "b", 2, 4, absl::Seconds(30)));
  EXPECT_EQ(got, (std::vector<GroupMember>{{0, "b"}}));
  ASSERT_OK_AND_ASSIGN(std::string seal, store.Get("g/final", absl::Seconds(1)));
  EXPECT_EQ(seal, "");
}

// A sealer that died after winning the seal: everyone else is alone this
// round, after the group's timeout and its grace.
TEST(FormGroupTest, NoSealMeansAloneNotAnError) {
  rdma::testing::InMemoryStore store;
  ASSERT_OK(store.Add("g/count", 1).status());
  ASSERT_OK(store.Set("g/member/1", "3 "));
  ASSERT_OK(store.Add("g/seal", 1).status());  // won, then died
  ASSERT_OK_AND_ASSIGN(std::vector<GroupMember> got,
                       FormGroup(store, "g", 0, "n", 2, 4, absl::Milliseconds(10)));
  EXPECT_EQ(got, (std::vector<GroupMember>{{0, "n"}}));
}

}  // namespace
}  // namespace rdmaflow::strategies::moshpit
