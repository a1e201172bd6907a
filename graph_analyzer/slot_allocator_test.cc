// File: slot_allocator_test.cc
#include "graph_analyzer/slot_allocator.h"

#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::graph {
namespace {

using ::testing::ElementsAre;

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
      requests.push_back({1 + rng() % 5000, begin,
                          begin + static_cast<int>(rng() % 20)});
    }
    uint64_t alignment = 64u << (rng() % 3);
    SlotLayout shared = LayoutSlots(requests, alignment, true);
    SlotLayout separate = LayoutSlots(requests, alignment, false);
    EXPECT_LE(shared.peak, separate.peak);
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

}  // namespace
}  // namespace rdmaflow::graph
