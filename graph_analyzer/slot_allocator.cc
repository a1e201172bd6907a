// File: slot_allocator.cc
#include "graph_analyzer/slot_allocator.h"

#include <algorithm>
#include <iterator>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/macros.h"
#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"

namespace rdmaflow::graph {
namespace {

// The free memory of a region below its high-water mark `peak`, as maximal
// blocks: indexed by offset (to merge a released block with its neighbours)
// and by (size, offset) (to find the best fit). Every operation is
// O(log blocks). Single-thread.
class FreeList {
 public:
  uint64_t peak() const { return peak_; }

  // The offset of `size` bytes: the smallest free block that holds them
  // (the lowest one among equals), else the free block that ends at the
  // peak, grown, else fresh memory at the peak.
  uint64_t Allocate(uint64_t size) {
    auto fit = by_size_.lower_bound({size, 0});
    if (fit != by_size_.end()) {
      auto [block_size, offset] = *fit;
      Erase(offset, block_size);
      if (block_size > size) Insert(offset + size, block_size - size);
      return offset;
    }
    if (!by_offset_.empty()) {
      auto [offset, block_size] = *std::prev(by_offset_.end());
      if (offset + block_size == peak_) {
        Erase(offset, block_size);
        peak_ = offset + size;
        return offset;
      }
    }
    uint64_t offset = peak_;
    peak_ += size;
    return offset;
  }

  // Returns [offset, offset + size), merged with free neighbours.
  void Release(uint64_t offset, uint64_t size) {
    if (size == 0) return;
    auto next = by_offset_.lower_bound(offset);
    if (next != by_offset_.end() && next->first == offset + size) {
      size += next->second;
      Erase(next->first, next->second);
    }
    auto prev = by_offset_.lower_bound(offset);
    if (prev != by_offset_.begin()) {
      --prev;
      if (prev->first + prev->second == offset) {
        offset = prev->first;
        size += prev->second;
        Erase(prev->first, prev->second);
      }
    }
    Insert(offset, size);
  }

 private:
  void Insert(uint64_t offset, uint64_t size) {
    by_offset_.emplace(offset, size);
    by_size_.emplace(size, offset);
  }
  void Erase(uint64_t offset, uint64_t size) {
    by_offset_.erase(offset);
    by_size_.erase({size, offset});
  }

  absl::btree_map<uint64_t, uint64_t> by_offset_;           // offset -> size
  absl::btree_set<std::pair<uint64_t, uint64_t>> by_size_;  // (size, offset)
  uint64_t peak_ = 0;
};

// Work allowed to greedy by size, in pairs of slots live at the same time:
// 64 per slot on average (a real step's tensors overlap with a few dozen
// others), and at least 2^16 (a few hundred slots all live together, a
// millisecond). Beyond it (as for thousands of gradients all live until a
// parameter server sums them) only the sweeps run, which keeps the whole
// layout O(n log n).
constexpr size_t kGreedyPairsPerSlot = 64;
constexpr size_t kMinGreedyPairs = size_t{1} << 16;

// The slots in order of begin (then request index), with sizes aligned and
// inverted intervals taken as live at their begin. Slots are numbered by
// this order ("positions") from here on: slots live at the same time are
// then close together in memory.
struct Timeline {
  std::vector<size_t> request;  // The request of each slot.
  std::vector<uint64_t> size;
  std::vector<int> begin;  // Non-decreasing.
  std::vector<int> end;

  size_t count() const { return size.size(); }
};

Timeline MakeTimeline(absl::Span<const SlotRequest> requests,
                      uint64_t alignment) {
  const size_t n = requests.size();
  Timeline t;
  t.request.resize(n);
  std::iota(t.request.begin(), t.request.end(), 0);
  std::sort(t.request.begin(), t.request.end(), [&](size_t a, size_t b) {
    return requests[a].live_begin != requests[b].live_begin
               ? requests[a].live_begin < requests[b].live_begin
               : a < b;
  });
  t.size.resize(n);
  t.begin.resize(n);
  t.end.resize(n);
  for (size_t k = 0; k < n; ++k) {
    const SlotRequest& r = requests[t.request[k]];
    t.size[k] = AlignUp(r.bytes, alignment);
    t.begin[k] = r.live_begin;
    t.end[k] = std::max(r.live_begin, r.live_end);
  }
  return t;
}

// Sweep over time: each slot takes memory (best fit) when it becomes live
// and gives it back after its last live position. With `reverse`, time runs
// backwards, which packs differently when lifetimes are skewed.
SlotLayout SweepLayout(const Timeline& t, bool reverse) {
  const size_t n = t.count();
  auto first = [&](size_t k) { return reverse ? -t.end[k] : t.begin[k]; };
  auto last = [&](size_t k) { return reverse ? -t.begin[k] : t.end[k]; };
  // Allocations by first position, the largest first among slots that start
  // together; releases by last position.
  std::vector<size_t> by_first(n);
  std::iota(by_first.begin(), by_first.end(), 0);
  std::sort(by_first.begin(), by_first.end(), [&](size_t a, size_t b) {
    if (first(a) != first(b)) return first(a) < first(b);
    if (t.size[a] != t.size[b]) return t.size[a] > t.size[b];
    return a < b;
  });
  std::vector<size_t> by_last(n);
  std::iota(by_last.begin(), by_last.end(), 0);
  std::sort(by_last.begin(), by_last.end(), [&](size_t a, size_t b) {
    return last(a) != last(b) ? last(a) < last(b) : a < b;
  });
  SlotLayout layout;
  layout.offsets.resize(n);
  FreeList free;
  size_t released = 0;
  for (size_t k : by_first) {
    // Intervals are closed: a slot whose last position is p is still live
    // at p. Every slot released here started before `k`: it has an offset.
    while (released < n && last(by_last[released]) < first(k)) {
      size_t j = by_last[released++];
      free.Release(layout.offsets[j], t.size[j]);
    }
    layout.offsets[k] = free.Allocate(t.size[k]);
  }
  layout.peak = free.peak();
  return layout;
}

// Which slots are live at the same time. Those after slot k are k+1 ..
// later_end[k] - 1 (they begin no later than k ends); those before it are
// earlier_items[earlier_start[k] .. earlier_start[k + 1]).
struct LiveTogether {
  std::vector<size_t> later_end;
  std::vector<size_t> earlier_start;
  std::vector<size_t> earlier_items;
};

// The index, when at most `max_pairs` pairs of slots are live together
// (O(n log n + pairs)); else std::nullopt after O(n log n).
std::optional<LiveTogether> IndexLiveTogether(const Timeline& t,
                                              size_t max_pairs) {
  const size_t n = t.count();
  LiveTogether live;
  live.later_end.resize(n);
  size_t pairs = 0;
  for (size_t k = 0; k < n; ++k) {
    live.later_end[k] =
        std::upper_bound(t.begin.begin() + k + 1, t.begin.end(), t.end[k]) -
        t.begin.begin();
    pairs += live.later_end[k] - k - 1;
  }
  if (pairs > max_pairs) return std::nullopt;
  live.earlier_start.assign(n + 1, 0);
  for (size_t k = 0; k < n; ++k) {
    for (size_t m = k + 1; m < live.later_end[k]; ++m) {
      ++live.earlier_start[m + 1];
    }
  }
  for (size_t k = 0; k < n; ++k) {
    live.earlier_start[k + 1] += live.earlier_start[k];
  }
  live.earlier_items.resize(pairs);
  std::vector<size_t> next(live.earlier_start.begin(),
                           live.earlier_start.end() - 1);
  for (size_t k = 0; k < n; ++k) {
    for (size_t m = k + 1; m < live.later_end[k]; ++m) {
      live.earlier_items[next[m]++] = k;
    }
  }
  return live;
}

// Greedy by size (TensorFlow Lite's arena planner): the largest slot first,
// each at the lowest offset free of the already placed slots live at the
// same time as it. Ties go to the earlier interval, then the lower request
// index (that is, the lower position).
SlotLayout GreedyBySize(const Timeline& t, const LiveTogether& live) {
  const size_t n = t.count();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return t.size[a] != t.size[b] ? t.size[a] > t.size[b] : a < b;
  });
  SlotLayout layout;
  layout.offsets.resize(n);
  std::vector<char> placed(n, 0);
  std::vector<std::pair<uint64_t, uint64_t>> taken;  // [begin, end) by begin.
  auto take = [&](size_t j) {
    if (placed[j]) {
      taken.emplace_back(layout.offsets[j], layout.offsets[j] + t.size[j]);
    }
  };
  for (size_t k : order) {
    taken.clear();
    for (size_t m = k + 1; m < live.later_end[k]; ++m) take(m);
    for (size_t e = live.earlier_start[k]; e < live.earlier_start[k + 1]; ++e) {
      take(live.earlier_items[e]);
    }
    std::sort(taken.begin(), taken.end());
    // The first gap that fits, scanning up from 0.
    uint64_t offset = 0;
    for (const auto& [begin, end] : taken) {
      if (begin >= offset + t.size[k]) break;
      offset = std::max(offset, end);
    }
    layout.offsets[k] = offset;
    layout.peak = std::max(layout.peak, offset + t.size[k]);
    placed[k] = 1;
  }
  return layout;
}

}  // namespace

uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) & ~(alignment - 1);
}

SlotLayout LayoutSlots(absl::Span<const SlotRequest> requests,
                       uint64_t alignment, bool share) {
  const size_t n = requests.size();
  if (!share) {
    SlotLayout layout;
    layout.offsets.resize(n);
    for (size_t i = 0; i < n; ++i) {
      layout.offsets[i] = layout.peak;
      layout.peak += AlignUp(requests[i].bytes, alignment);
    }
    return layout;
  }
  const Timeline t = MakeTimeline(requests, alignment);
  // The candidate with the lowest peak; ties go to the earlier one.
  std::optional<SlotLayout> best;
  auto consider = [&](SlotLayout candidate) {
    if (!best.has_value() || candidate.peak < best->peak) {
      best = std::move(candidate);
    }
  };
  if (std::optional<LiveTogether> live = IndexLiveTogether(
          t, std::max(kMinGreedyPairs, kGreedyPairsPerSlot * n))) {
    consider(GreedyBySize(t, *live));
  }
  consider(SweepLayout(t, /*reverse=*/false));
  consider(SweepLayout(t, /*reverse=*/true));
  // Back from positions to requests.
  SlotLayout layout;
  layout.offsets.resize(n);
  layout.peak = best->peak;
  for (size_t k = 0; k < n; ++k) {
    ABSL_ASSERT(best->offsets[k] % alignment == 0);
    layout.offsets[t.request[k]] = best->offsets[k];
  }
  return layout;
}

}  // namespace rdmaflow::graph
