// File: peer_copy_test.cc
#include "common/peer_copy.h"

#include <cstddef>
#include <cstdint>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace rdmaflow {
namespace {

constexpr std::byte kGuard{0xA5};

// Copies `bytes` from a source at `from_offset` to a destination at
// `to_offset` (both within 64-byte aligned buffers) and checks every byte
// copied and none written around it.
void CheckCopy(size_t bytes, size_t from_offset, size_t to_offset, size_t streaming_min) {
  SCOPED_TRACE(testing::Message() << bytes << " bytes, source +" << from_offset
                                  << ", destination +" << to_offset << ", streaming from "
                                  << streaming_min);
  constexpr size_t kSlack = 128;
  alignas(64) static std::byte source[(1 << 14) + 2 * kSlack];
  alignas(64) static std::byte target[(1 << 14) + 2 * kSlack];
  ASSERT_LE(bytes + from_offset, sizeof(source) - kSlack);
  for (size_t i = 0; i < sizeof(source); ++i) {
    source[i] = static_cast<std::byte>((i * 131 + bytes) % 251);
    target[i] = kGuard;
  }
  CopyToPeer(target + kSlack + to_offset, source + from_offset, bytes, streaming_min);
  for (size_t i = 0; i < sizeof(target); ++i) {
    const bool inside = i >= kSlack + to_offset && i < kSlack + to_offset + bytes;
    const std::byte want = inside ? source[from_offset + (i - kSlack - to_offset)] : kGuard;
    ASSERT_EQ(target[i], want) << "byte " << i << (inside ? " (copied)" : " (outside)");
  }
}

TEST(CopyToPeerTest, CopiesEveryByteAtEveryAlignmentWhenStreaming) {
  for (size_t bytes : {128, 129, 191, 192, 255, 1000, 4096, 4097, 8191}) {
    for (size_t from = 0; from < 64; from += 7) {
      for (size_t to = 0; to < 64; to += 5) CheckCopy(bytes, from, to, /*streaming_min=*/1);
    }
  }
}

TEST(CopyToPeerTest, CopiesShortAndUnstreamedCopiesPlainly) {
  for (size_t bytes : {0, 1, 7, 63, 64, 127, 4096}) {
    CheckCopy(bytes, 3, 9, /*streaming_min=*/1);
    CheckCopy(bytes, 3, 9, /*streaming_min=*/0);
    CheckCopy(bytes, 3, 9, /*streaming_min=*/size_t{1} << 20);
  }
}

TEST(CopyToPeerTest, CopiesAtTheDefaultThreshold) {
  const size_t bytes = kDefaultStreamingCopyMinBytes + 17;
  std::vector<std::byte> source(bytes + 64), target(bytes + 64, kGuard);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<std::byte>(i * 7);
  CopyToPeer(target.data() + 1, source.data() + 2, bytes, kDefaultStreamingCopyMinBytes);
  EXPECT_EQ(target[0], kGuard);
  for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(target[1 + i], source[2 + i]) << i;
  EXPECT_EQ(target[bytes + 1], kGuard);
}

TEST(CopyToPeerTest, CountsTheCopiesItStreams) {
  std::vector<std::byte> source(4096, std::byte{1}), target(4096);
  const uint64_t before = StreamedCopiesOnThisThread();
  CopyToPeer(target.data(), source.data(), 4096, /*streaming_min=*/0);
  CopyToPeer(target.data(), source.data(), 4096, /*streaming_min=*/8192);
  CopyToPeer(target.data(), source.data(), 100, /*streaming_min=*/1);
  EXPECT_EQ(StreamedCopiesOnThisThread(), before);
  CopyToPeer(target.data(), source.data(), 4096, /*streaming_min=*/4096);
  EXPECT_EQ(StreamedCopiesOnThisThread(), before + (StreamingCopyAvailable() ? 1 : 0));
}

// A writer streams a new pattern into a buffer and release-stores the
// round's number; a reader on another thread acquires it and finds every
// byte of that round (the store fence orders the streamed stores before
// the flag). Each wait has a deadline.
TEST(CopyToPeerTest, AReaderThatSeesTheFlagSeesEveryStreamedByte) {
  constexpr size_t kBytes = 64 << 10;
  constexpr uint64_t kRounds = 300;
  std::vector<uint64_t> source(kBytes / 8);
  std::vector<uint64_t> target(kBytes / 8, 0);
  std::atomic<uint64_t> flag{0}, seen{0};
  std::atomic<bool> failed{false};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  auto expired = [&] { return std::chrono::steady_clock::now() > deadline; };
  std::thread reader([&] {
    for (uint64_t round = 1; round <= kRounds; ++round) {
      while (flag.load(std::memory_order_acquire) < round) {
        if (expired() || failed.load()) return;
      }
      for (size_t i = 0; i < target.size(); ++i) {
        if (target[i] != (round << 32 | i)) {
          ADD_FAILURE() << "round " << round << ": word " << i << " is stale";
          failed = true;
          return;
        }
      }
      seen.store(round, std::memory_order_release);
    }
  });
  for (uint64_t round = 1; round <= kRounds && !failed.load(); ++round) {
    for (size_t i = 0; i < source.size(); ++i) source[i] = round << 32 | i;
    CopyToPeer(target.data(), source.data(), kBytes, /*streaming_min=*/1);
    flag.store(round, std::memory_order_release);
    while (seen.load(std::memory_order_acquire) < round && !failed.load()) {
      if (expired()) break;
    }
    if (expired()) break;
  }
  reader.join();
  EXPECT_FALSE(expired()) << "the reader saw " << seen.load() << " of " << kRounds << " rounds";
  EXPECT_EQ(seen.load(), kRounds);
}

}  // namespace
}  // namespace rdmaflow
