// File: testing/racing_writer.cc
#include "rdma/testing/racing_writer.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <utility>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/numbers.h"

namespace rdmaflow::rdma::testing {
namespace {

// One byte as a DMA write lands it: no tearing within the byte, no order
// with the reader's loads.
void StoreByte(std::byte* at, std::byte value) {
  __atomic_store_n(reinterpret_cast<unsigned char*>(at), static_cast<unsigned char>(value),
                   __ATOMIC_RELAXED);
}

}  // namespace

std::unique_ptr<RacingWriter> RacingWriter::Flipping(absl::Span<std::byte> region,
                                                     size_t offset,
                                                     std::vector<std::vector<std::byte>> images,
                                                     Tearing tearing) {
  ABSL_RAW_CHECK(!images.empty(), "a flipping writer needs at least one image");
  for (const auto& image : images) {
    ABSL_RAW_CHECK(offset <= region.size() && image.size() <= region.size() - offset,
                   "an image does not fit the region from its offset");
    ABSL_RAW_CHECK(tearing == Tearing::kBytes ||
                       (image.size() % 8 == 0 &&
                        reinterpret_cast<uintptr_t>(region.data() + offset) % 8 == 0),
                   "whole words need 8-byte images at an 8-byte aligned offset");
  }
  std::unique_ptr<RacingWriter> writer(new RacingWriter());
  writer->Start([region, offset, tearing, images = std::move(images)](uint64_t round) {
    const std::vector<std::byte>& image = images[round % images.size()];
    if (tearing == Tearing::kWords) {
      for (size_t i = 0; i < image.size(); i += 8) {
        uint64_t word = 0;
        std::memcpy(&word, image.data() + i, 8);
        __atomic_store_n(reinterpret_cast<uint64_t*>(region.data() + offset + i), word,
                         __ATOMIC_RELAXED);
      }
      return;
    }
    for (size_t i = 0; i < image.size(); ++i) StoreByte(&region[offset + i], image[i]);
  });
  return writer;
}

std::unique_ptr<RacingWriter> RacingWriter::Scribbling(absl::Span<std::byte> region,
                                                       size_t offset, size_t length,
                                                       uint64_t seed) {
  ABSL_RAW_CHECK(length > 0 && offset <= region.size() && length <= region.size() - offset,
                 "the scribbled window does not fit the region");
  std::unique_ptr<RacingWriter> writer(new RacingWriter());
  writer->Start([region, offset, length, rng = std::mt19937_64(seed)](uint64_t) mutable {
    // A burst of a few bytes: enough to change a field whole, short enough
    // that the reader sees many different states.
    for (int i = 0; i < 8; ++i) {
      const uint64_t draw = rng();
      StoreByte(&region[offset + (draw >> 8) % length], static_cast<std::byte>(draw & 0xff));
    }
  });
  return writer;
}

void RacingWriter::Start(std::function<void(uint64_t round)> write) {
  thread_ = std::thread([this, write = std::move(write)] {
    for (uint64_t round = 0; !stop_.load(std::memory_order_relaxed); ++round) {
      write(round);
      rounds_.store(round + 1, std::memory_order_relaxed);
    }
  });
}

RacingWriter::~RacingWriter() { Stop(); }

void RacingWriter::Stop() {
  stop_.store(true, std::memory_order_relaxed);
  if (thread_.joinable()) thread_.join();
}

RaceTally RaceParse(RacingWriter& writer, const std::function<absl::Status()>& parse,
                    const RaceOptions& options) {
  RaceTally tally;
  const absl::Time give_up = absl::Now() + options.budget;
  // Only calls begun once the writer has run count toward min_calls: on a
  // loaded machine its thread may first run long after the calls began, and
  // a race whose counted calls all met the value it started with proves
  // nothing (a racing test once saw no forged value in 50 such races).
  int64_t raced_calls = 0;
  while (raced_calls < options.min_calls || writer.rounds() < options.min_writer_rounds) {
    // The clock only every 64 calls: the parse is the point of the loop.
    if ((tally.calls & 63) == 0 && tally.calls > 0 && absl::Now() > give_up) break;
    if (writer.rounds() > 0) ++raced_calls;
    const absl::Status status = parse();
    ++tally.calls;
    if (status.ok()) {
      ++tally.ok;
    } else if (status.code() == absl::StatusCode::kDataLoss) {
      ++tally.data_loss;
    } else {
      if (tally.other++ == 0) tally.first_other = status;
    }
  }
  writer.Stop();
  tally.writer_rounds = writer.rounds();
  return tally;
}

void Add(RaceTally& total, const RaceTally& race) {
  total.calls += race.calls;
  total.ok += race.ok;
  total.data_loss += race.data_loss;
  total.writer_rounds += race.writer_rounds;
  if (total.other == 0) total.first_other = race.first_other;
  total.other += race.other;
}

RaceTally RaceUntilBothEndings(const std::function<std::unique_ptr<RacingWriter>()>& start,
                               const std::function<absl::Status()>& parse, int tries,
                               const RaceOptions& options) {
  RaceTally total;
  for (int i = 0; i < tries && (total.ok == 0 || total.data_loss == 0); ++i) {
    std::unique_ptr<RacingWriter> writer = start();
    Add(total, RaceParse(*writer, parse, options));
  }
  return total;
}

std::optional<uint64_t> QuotedAfter(absl::string_view message, absl::string_view marker) {
  const size_t at = message.find(marker);
  if (at == absl::string_view::npos) return std::nullopt;
  absl::string_view rest = message.substr(at + marker.size());
  rest = rest.substr(0, rest.find_first_of(" ,;)"));
  uint64_t value = 0;
  if (!absl::SimpleAtoi(rest, &value)) return std::nullopt;
  return value;
}

}  // namespace rdmaflow::rdma::testing
