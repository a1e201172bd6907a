// File: slot_allocator_test.cc
#include "graph_analyzer/slot_allocator.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::graph {
namespace {

using ::testing::ElementsAre;

// The first pair of slots live at the same time that overlap in memory, as
// "i and j", or "" when there is none; also checks alignment and the peak.
// O(n log n): a sweep over time keeps the live slots' memory ranges ordered by
// offset, and a range overlaps some live one only if it overlaps a neighbour.
std::string FindOverlap(const std::vector<SlotRequest>& requests,
                        const SlotLayout& layout, uint64_t alignment) {
  const size_t n = requests.size();
  auto end_of = [&](size_t i) {
    return std::max(requests[i].live_begin, requests[i].live_end);
  };
  std::vector<size_t> by_begin(n), by_end(n);
  for (size_t i = 0; i < n; ++i) by_begin[i] = by_end[i] = i;
  std::sort(by_begin.begin(), by_begin.end(), [&](size_t a, size_t b) {
    return requests[a].live_begin < requests[b].live_begin;
  });
  std::sort(by_end.begin(), by_end.end(),
            [&](size_t a, size_t b) { return end_of(a) < end_of(b); });
  std::set<std::pair<uint64_t, size_t>> live;  // (offset, slot)
  size_t ended = 0;
  for (size_t i : by_begin) {
    uint64_t offset = layout.offsets[i];
    if (offset % alignment != 0) return "misaligned " + std::to_string(i);
    if (offset + requests[i].bytes > layout.peak) {
      return "past the peak " + std::to_string(i);
    }
    while (ended < n && end_of(by_end[ended]) < requests[i].live_begin) {
      size_t j = by_end[ended++];
      live.erase({layout.offsets[j], j});
    }
    if (requests[i].bytes == 0) continue;
    auto next = live.lower_bound({offset, 0});
    if (next != live.end() && next->first < offset + requests[i].bytes) {
      return std::to_string(i) + " and " + std::to_string(next->second);
    }
    if (next != live.begin()) {
      auto prev = std::prev(next);
      if (prev->first + requests[prev->second].bytes > offset) {
        return std::to_string(i) + " and " + std::to_string(prev->second);
      }
    }
    live.emplace(offset, i);
  }
  return "";
}

// The most bytes live at one position: no layout can do with less.
uint64_t MaxLiveBytes(const std::vector<SlotRequest>& requests,
                      uint64_t alignment) {
  std::vector<std::pair<int64_t, int64_t>> events;  // (2 t (+1 at end), bytes)
  for (const SlotRequest& r : requests) {
    int64_t bytes = AlignUp(r.bytes, alignment);
    events.emplace_back(2 * int64_t{r.live_begin}, bytes);
    events.emplace_back(2 * int64_t{r.live_end} + 1, -bytes);
  }
  std::sort(events.begin(), events.end());
  int64_t live = 0;
  int64_t most = 0;
  for (const auto& [t, bytes] : events) {
    live += bytes;
    most = std::max(most, live);
  }
  return most;
}

TEST(SlotAllocatorTest, AlignUp) {
  EXPECT_EQ(AlignUp(0, 64), 0u);
  EXPECT_EQ(AlignUp(1, 64), 64u);
  EXPECT_EQ(AlignUp(64, 64), 64u);
  EXPECT_EQ(AlignUp(65, 4096), 4096u);
}

TEST(SlotAllocatorTest, WithoutSharingSlotsAreLaidOutInOrder) {
  SlotLayout layout = LayoutSlots({{100, 0, 1}, {64, 5, 6}, {1, 9, 9}}, 64,
                                  /*share=*/false);
  EXPECT_THAT(layout.offsets, ElementsAre(0, 128, 192));
  EXPECT_EQ(layout.peak, 256u);
}

TEST(SlotAllocatorTest, DisjointLifetimesShareMemory) {
  // a [0,2] and b [3,5] never overlap; c [1,4] overlaps both.
  SlotLayout layout = LayoutSlots({{1000, 0, 2}, {1000, 3, 5}, {64, 1, 4}}, 64,
                                  /*share=*/true);
  EXPECT_EQ(layout.offsets[0], layout.offsets[1]);
  EXPECT_EQ(layout.peak, 1024u + 64u);
}

TEST(SlotAllocatorTest, TouchingIntervalsOverlap) {
  // Closed intervals: [0,3] and [3,5] are both live at position 3.
  SlotLayout layout = LayoutSlots({{64, 0, 3}, {64, 3, 5}}, 64, true);
  EXPECT_NE(layout.offsets[0], layout.offsets[1]);
}

TEST(SlotAllocatorTest, InvertedIntervalIsLiveAtItsBegin) {
  SlotLayout layout =
      LayoutSlots({{64, 5, 2}, {64, 5, 5}, {64, 0, 3}}, 64, true);
  EXPECT_NE(layout.offsets[0], layout.offsets[1]);
  EXPECT_EQ(layout.peak, 128u);
}

TEST(SlotAllocatorTest, FillsAGapBetweenLiveSlots) {
  // Big slots at [0,256) and [320,..) live throughout, freed gap at 256.
  SlotLayout layout = LayoutSlots(
      {{256, 0, 10}, {64, 0, 1}, {512, 0, 10}, {64, 5, 6}}, 64, true);
  EXPECT_EQ(layout.offsets[0], 512u);
  EXPECT_EQ(layout.offsets[2], 0u);
  EXPECT_EQ(layout.offsets[1], 768u);
  EXPECT_EQ(layout.offsets[3], 768u);
  EXPECT_EQ(layout.peak, 832u);
}

// Greedy by size puts both 256-byte slots at 0, then the 64-byte slot live
// over [1,4] above the first and the one over [3,5] above both (peak 384);
// the sweep packs them in 320 bytes, the most ever live at once.
TEST(SlotAllocatorTest, KeepsTheLowerPeakOfItsHeuristics) {
  std::vector<SlotRequest> requests = {
      {64, 3, 5}, {256, 5, 6}, {64, 1, 4}, {256, 0, 2}};
  SlotLayout layout = LayoutSlots(requests, 64, true);
  EXPECT_EQ(layout.peak, 320u);
  EXPECT_EQ(layout.peak, MaxLiveBytes(requests, 64));
  EXPECT_EQ(FindOverlap(requests, layout, 64), "");
}

// Property: over random requests, no two slots live at the same time overlap
// in memory, every offset is aligned, and sharing never needs more memory
// than not sharing.
TEST(SlotAllocatorTest, RandomRequestsNeverOverlapWhileLive) {
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::vector<SlotRequest> requests;
    int n = 1 + rng() % 40;
    for (int i = 0; i < n; ++i) {
      int begin = rng() % 50;
      requests.push_back(
          {1 + rng() % 5000, begin, begin + static_cast<int>(rng() % 20)});
    }
    uint64_t alignment = 64u << (rng() % 3);
    SlotLayout shared = LayoutSlots(requests, alignment, true);
    SlotLayout separate = LayoutSlots(requests, alignment, false);
    EXPECT_LE(shared.peak, separate.peak);
    EXPECT_GE(shared.peak, MaxLiveBytes(requests, alignment));
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(shared.offsets[i] % alignment, 0u);
      EXPECT_LE(shared.offsets[i] + requests[i].bytes, shared.peak);
      for (int j = i + 1; j < n; ++j) {
        bool live_together = requests[i].live_begin <= requests[j].live_end &&
                             requests[j].live_begin <= requests[i].live_end;
        bool disjoint =
            shared.offsets[i] + requests[i].bytes <= shared.offsets[j] ||
            shared.offsets[j] + requests[j].bytes <= shared.offsets[i];
        EXPECT_TRUE(!live_together || disjoint)
            << "round " << round << ": slots " << i << " and " << j;
      }
    }
  }
}

// 100,000 slots of one link, as a long training step makes them: each lives
// for up to `max_length` positions, and one in `long_every` for up to 20,000
// (skip connections); sizes from 64 B to 4 MiB.
std::vector<SlotRequest> LongStep(int max_length, int long_every) {
  std::mt19937 rng(11);
  std::vector<SlotRequest> requests;
  for (int i = 0; i < 100000; ++i) {
    int begin = i / 2;
    int length = static_cast<int>(rng() % max_length);
    if (rng() % long_every == 0) length = static_cast<int>(rng() % 20000);
    uint64_t limit = uint64_t{4} << (rng() % 21);
    requests.push_back({1 + rng() % limit, begin, begin + length});
  }
  return requests;
}

// Checked in O(n log n); the layout must also be close to the lower bound
// (the most bytes live at once) and far below no sharing.
void CheckLargeLayout(const std::vector<SlotRequest>& requests) {
  SlotLayout shared = LayoutSlots(requests, 64, true);
  EXPECT_EQ(FindOverlap(requests, shared, 64), "");
  uint64_t bound = MaxLiveBytes(requests, 64);
  EXPECT_GE(shared.peak, bound);
  EXPECT_LE(shared.peak, bound + bound / 4);
  EXPECT_LT(shared.peak, LayoutSlots(requests, 64, false).peak / 4);
}

// About 5 M pairs live together: greedy by size runs beside the sweeps.
TEST(SlotAllocatorTest, HundredThousandShortLivedSlots) {
  CheckLargeLayout(LongStep(/*max_length=*/48, /*long_every=*/1 << 30));
}

// With long-lived slots, about 10^8 pairs live together: only the sweeps.
TEST(SlotAllocatorTest, HundredThousandSlotsWithLongLivedOnes) {
  CheckLargeLayout(LongStep(/*max_length=*/48, /*long_every=*/16));
}

TEST(SlotAllocatorTest, LayoutIsDeterministic) {
  std::vector<SlotRequest> requests = LongStep(48, 16);
  requests.resize(20000);
  SlotLayout first = LayoutSlots(requests, 64, true);
  SlotLayout second = LayoutSlots(requests, 64, true);
  EXPECT_EQ(first.offsets, second.offsets);
  EXPECT_EQ(first.peak, second.peak);
}

// Two generations of 3,000 slots each, all live together within a
// generation: 9 M pairs live together, too many for greedy by size, so only
// the sweeps lay them out; the second generation reuses the first's memory.
TEST(SlotAllocatorTest, DenseGenerationsShareMemory) {
  std::mt19937 rng(5);
  std::vector<SlotRequest> requests;
  uint64_t first = 0;
  uint64_t second = 0;
  for (int i = 0; i < 6000; ++i) {
    bool early = i % 2 == 0;
    uint64_t bytes = 64 * (1 + rng() % 100);
    (early ? first : second) += bytes;
    requests.push_back(early ? SlotRequest{bytes, 0, 10}
                             : SlotRequest{bytes, 11, 20});
  }
  SlotLayout shared = LayoutSlots(requests, 64, true);
  EXPECT_EQ(FindOverlap(requests, shared, 64), "");
  EXPECT_EQ(shared.peak, std::max(first, second));
}

// The checker itself finds an overlap.
TEST(SlotAllocatorTest, FindOverlapReportsLiveSlotsThatOverlap) {
  std::vector<SlotRequest> requests = {{128, 0, 5}, {64, 5, 9}, {64, 6, 9}};
  SlotLayout layout;
  layout.offsets = {0, 64, 128};
  layout.peak = 192;
  EXPECT_EQ(FindOverlap(requests, layout, 64), "1 and 0");
  layout.offsets = {0, 128, 128};
  EXPECT_EQ(FindOverlap(requests, layout, 64), "2 and 1");
  layout.offsets = {0, 128, 64};
  EXPECT_EQ(FindOverlap(requests, layout, 64), "");
}

}  // namespace
}  // namespace rdmaflow::graph
