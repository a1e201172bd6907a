// File: testing/racing_writer.h
// -----------------------------------------------------------------------------
// RacingWriter: for the hostile suite, a peer that keeps rewriting memory it
// may write while the component under test parses it. A forging peer does
// not write once and wait: over RDMA it can change a header, an index or a
// flag between a reader's check and its use. The writer runs on a thread of
// its own until it is stopped, in one of two modes:
//
//   - Flipping: copies a list of byte images over a window of the region in
//     turn (a valid value, then an invalid one, and again), so a reader that
//     reads a field twice sees it change between its reads;
//   - Scribbling: writes random bytes at random offsets of the window.
//
// RaceParse() then calls the parser again and again while the writer runs,
// until both have done enough rounds, and counts how each call ended. A
// reader that copies once, checks the copy and uses only the copy ends every
// call in a valid result or in a named error (kDataLoss); one that re-reads
// after its check reaches memory it should not, which AddressSanitizer
// (tools/sanitize.sh, tests tagged `hostile`) reports.
//
//   std::vector<std::byte> message = ...;  // the region under attack
//   auto writer = RacingWriter::Flipping(absl::MakeSpan(message), /*offset=*/20,
//                                        {valid_index_bytes, huge_index_bytes});
//   RaceTally tally = RaceParse(*writer, [&] { return Parse(message); });
//   EXPECT_EQ(tally.other, 0) << tally.first_other;
//
// The writer stores bytes (or aligned words) with relaxed atomic stores, as
// a NIC's DMA would land them; the reader under test uses its ordinary
// loads. Thread-safe.
#ifndef RDMAFLOW_RDMA_TESTING_RACING_WRITER_H_
#define RDMAFLOW_RDMA_TESTING_RACING_WRITER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace rdmaflow::rdma::testing {

class RacingWriter {
 public:
  // How a rewrite lands: byte by byte (any word may be torn between two
  // images, as a DMA of unaligned or long data may be), or in aligned
  // 8-byte words, each whole (as a NIC's aligned 8-byte write lands).
  enum class Tearing { kBytes, kWords };

  // Copies images[0], images[1], ... in turn to `region` from `offset` on,
  // forever (until Stop()). Every image must fit the region from `offset`;
  // with kWords, the destination must be 8-byte aligned and every image a
  // multiple of 8 bytes.
  static std::unique_ptr<RacingWriter> Flipping(absl::Span<std::byte> region, size_t offset,
                                                std::vector<std::vector<std::byte>> images,
                                                Tearing tearing = Tearing::kBytes);
  // Writes random bytes (from `seed`) at random offsets of
  // region[offset, offset + length).
  static std::unique_ptr<RacingWriter> Scribbling(absl::Span<std::byte> region, size_t offset,
                                                  size_t length, uint64_t seed);

  RacingWriter(const RacingWriter&) = delete;
  RacingWriter& operator=(const RacingWriter&) = delete;
  ~RacingWriter();  // Stop()s

  // Ends the writer's thread; the region is left as its last write left it.
  void Stop();
  // Rewrites so far (one image copied, or one random burst).
  uint64_t rounds() const { return rounds_.load(std::memory_order_relaxed); }

 private:
  RacingWriter() = default;
  void Start(std::function<void(uint64_t round)> write);

  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> rounds_{0};
  std::thread thread_;
};

// How the calls of a RaceParse() ended.
struct RaceTally {
  int64_t calls = 0;
  int64_t ok = 0;
  int64_t data_loss = 0;   // refused, naming what did not fit
  int64_t other = 0;       // any other code: a test failure
  absl::Status first_other = absl::OkStatus();
  uint64_t writer_rounds = 0;
};

struct RaceOptions {
  int64_t min_calls = 2000;
  uint64_t min_writer_rounds = 2000;
  // Caps the run on a loaded machine, where the writer may get little time;
  // a run that ends here with fewer rounds than asked is still counted.
  absl::Duration budget = absl::Seconds(20);
};

// Calls `parse` until it has been called options.min_calls times after
// `writer` first ran and `writer` has done options.min_writer_rounds
// rewrites (or the budget is spent), then stops the writer.
RaceTally RaceParse(RacingWriter& writer, const std::function<absl::Status()>& parse,
                    const RaceOptions& options = {});

// Adds `race`'s counts to `total` (the first other error is kept).
void Add(RaceTally& total, const RaceTally& race);

// Races (a fresh writer from `start` each time) until both endings, a valid
// result and kDataLoss, were seen, at most `tries` times: on a loaded
// machine the writer and the reader may take turns on one core, and a race
// in which the reader met only one value proves nothing either way.
RaceTally RaceUntilBothEndings(const std::function<std::unique_ptr<RacingWriter>()>& start,
                               const std::function<absl::Status()>& parse, int tries = 20,
                               const RaceOptions& options = {});

// The number quoted right after `marker` in an error message ("wrote 5
// into", "credit of 1 after"), up to a space or ,;) ; nullopt if absent.
std::optional<uint64_t> QuotedAfter(absl::string_view message, absl::string_view marker);

// The bytes of a trivially copyable value, for Flipping() images.
template <typename T>
std::vector<std::byte> BytesOf(const T& value) {
  std::vector<std::byte> bytes(sizeof(T));
  __builtin_memcpy(bytes.data(), &value, sizeof(T));
  return bytes;
}

}  // namespace rdmaflow::rdma::testing

#endif  // RDMAFLOW_RDMA_TESTING_RACING_WRITER_H_
