// File: ring_schedule_test.cc
// Simulates the ring on the schedule alone: every position's buffer as a set
// of contributions per element; after all messages every element must hold
// every rank's contribution exactly once.
#include "collectives/ring_schedule.h"

#include <vector>

#include "gtest/gtest.h"

namespace rdmaflow::collectives {
namespace {

// contributions[rank][element] = bitmask of ranks summed into it.
void Simulate(int n, size_t count, size_t piece) {
  SCOPED_TRACE(testing::Message() << n << " ranks, " << count << " elements, pieces of " << piece);
  std::vector<RingSchedule> s;
  std::vector<std::vector<uint32_t>> have(n, std::vector<uint32_t>(count));
  for (int r = 0; r < n; ++r) {
    s.emplace_back(n, r, count, piece);
    for (auto& e : have[r]) e = 1u << r;
  }
  // Segments tile the elements.
  size_t covered = 0;
  for (int k = 0; k < n; ++k) {
    EXPECT_EQ(s[0].Segment(k).begin, covered);
    covered += s[0].Segment(k).count;
  }
  EXPECT_EQ(covered, count);
  for (size_t m = 0; m < s[0].messages(); ++m) {
    // All sends of message m read the state before any receive of m.
    std::vector<std::vector<uint32_t>> sent(n);
    for (int r = 0; r < n; ++r) {
      const ElementRange out = s[r].Sent(m);
      const ElementRange in = s[(r + 1) % n].Received(m);
      ASSERT_EQ(out.begin, in.begin) << "message " << m << " from " << r;
      ASSERT_EQ(out.count, in.count);
      EXPECT_LE(out.count, piece);
      sent[r].assign(have[r].begin() + out.begin, have[r].begin() + out.begin + out.count);
    }
    for (int r = 0; r < n; ++r) {
      const int to = (r + 1) % n;
      const ElementRange in = s[to].Received(m);
      for (size_t i = 0; i < in.count; ++i) {
        uint32_t& mine = have[to][in.begin + i];
        if (s[to].is_reduce(m)) {
          ASSERT_EQ(mine & sent[r][i], 0u) << "a contribution counted twice";
          mine |= sent[r][i];
        } else {
          mine = sent[r][i];
        }
      }
    }
  }
  const uint32_t all = (n == 32 ? ~0u : (1u << n) - 1);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(have[r][i], all) << "rank " << r << " element " << i;
  }
}

TEST(RingScheduleTest, EveryElementGetsEveryContributionOnce) {
  for (int n : {1, 2, 3, 4, 5, 8}) {
    for (size_t count : {1, 2, 7, 8, 9, 64, 100, 1001}) {
      for (size_t piece : {1, 3, 16, 4096}) Simulate(n, count, piece);
    }
  }
}

TEST(RingScheduleTest, PiecesAndMessages) {
  RingSchedule s(4, 1, 1000, 100);  // segments of 250: 3 pieces
  EXPECT_EQ(s.pieces(), 3u);
  EXPECT_EQ(s.messages(), 18u);
  EXPECT_TRUE(s.is_reduce(8));
  EXPECT_FALSE(s.is_reduce(9));
  EXPECT_EQ(RingSchedule(1, 0, 10, 4).messages(), 0u);
  // Uneven: 10 elements over 4 ranks are 3, 3, 2, 2.
  RingSchedule u(4, 0, 10, 8);
  EXPECT_EQ(u.Segment(1).begin, 3u);
  EXPECT_EQ(u.Segment(3).count, 2u);
}

}  // namespace
}  // namespace rdmaflow::collectives
