// File: shared_segments_test.cc
#include "collectives/shared_segments.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::collectives {
namespace {

using ::testing::HasSubstr;
using ::rdmaflow::testing::StatusIs;

size_t Page() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

TEST(SharedSegmentsTest, AllocatesSealedNamedSegmentsAndFindsThem) {
  SharedSegments segments(size_t{64} << 20);
  ASSERT_OK_AND_ASSIGN(std::byte* data, segments.Allocate(100000));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % Page(), 0u);
  std::memset(data, 7, 100000);
  const std::optional<SegmentRef> ref = segments.Find(data + 10, 1000);
  ASSERT_TRUE(ref.has_value());
  EXPECT_EQ(ref->offset, 10u);
  // The descriptor is the segment's: named with its token, sealed.
  char link[256];
  const std::string self = "/proc/self/fd/" + std::to_string(ref->fd);
  const ssize_t length = readlink(self.c_str(), link, sizeof(link));
  ASSERT_GT(length, 0);
  EXPECT_EQ(std::string(link, length), "/memfd:" + SegmentName(ref->token) + " (deleted)");
  const int seals = fcntl(ref->fd, F_GET_SEALS);
  EXPECT_EQ(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
            F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  EXPECT_NE(ftruncate(ref->fd, 0), 0);
  // A range that leaves the segment, or memory that is no segment, is not
  // found.
  const size_t size = (100000 + Page() - 1) / Page() * Page();
  EXPECT_TRUE(segments.Find(data, size).has_value());
  EXPECT_FALSE(segments.Find(data, size + 1).has_value());
  EXPECT_FALSE(segments.Find(data + size, 1).has_value());
  int on_stack = 0;
  EXPECT_FALSE(segments.Find(reinterpret_cast<std::byte*>(&on_stack), 4).has_value());
  EXPECT_EQ(segments.stats().segments, 1);
  EXPECT_EQ(segments.stats().live_bytes, static_cast<int64_t>(size));
  segments.Release(data);
  EXPECT_FALSE(segments.Find(data, 1).has_value());
}

TEST(SharedSegmentsTest, ReleasedSegmentsComeBackForAboutTheirSize) {
  SharedSegments segments(size_t{64} << 20);
  ASSERT_OK_AND_ASSIGN(std::byte* first, segments.Allocate(size_t{1} << 20));
  const uint64_t token = segments.Find(first, 1)->token;
  segments.Release(first);
  EXPECT_EQ(segments.stats().pooled_bytes, int64_t{1} << 20);
  // Far smaller: a segment of its own; then the pooled one, same token.
  ASSERT_OK_AND_ASSIGN(std::byte* small, segments.Allocate(Page()));
  EXPECT_NE(small, first);
  ASSERT_OK_AND_ASSIGN(std::byte* again, segments.Allocate((size_t{1} << 20) - 100));
  EXPECT_EQ(again, first);
  EXPECT_EQ(segments.Find(again, 1)->token, token);
  EXPECT_EQ(segments.stats().reused, 1);
  EXPECT_EQ(segments.stats().segments, 2);
  EXPECT_EQ(segments.stats().pooled_bytes, 0);
  EXPECT_TRUE(segments.Release(small));
  EXPECT_TRUE(segments.Release(again));
  EXPECT_FALSE(segments.Release(again));  // twice: left alone
  EXPECT_FALSE(segments.Release(nullptr));
  std::byte ours[16];
  EXPECT_FALSE(segments.Release(ours));
  EXPECT_EQ(segments.stats().live_bytes, 0);
}

TEST(SharedSegmentsTest, ThePoolIsBounded) {
  SharedSegments segments(size_t{1} << 20);
  ASSERT_OK_AND_ASSIGN(std::byte* a, segments.Allocate(size_t{1} << 20));
  ASSERT_OK_AND_ASSIGN(std::byte* b, segments.Allocate(size_t{1} << 20));
  segments.Release(a);
  segments.Release(b);  // the pool is full: unmapped
  EXPECT_EQ(segments.stats().pooled_bytes, int64_t{1} << 20);
  ASSERT_OK_AND_ASSIGN(std::byte* c, segments.Allocate(size_t{1} << 20));
  ASSERT_OK_AND_ASSIGN(std::byte* d, segments.Allocate(size_t{1} << 20));
  EXPECT_EQ(segments.stats().reused, 1);
  EXPECT_EQ(segments.stats().segments, 3);
  segments.Release(c);
  segments.Release(d);
}

TEST(SharedSegmentsTest, RefusesEmptyAndImpossibleSizes) {
  SharedSegments segments(0);
  EXPECT_THAT(segments.Allocate(0), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(segments.Allocate(SIZE_MAX - 10), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(segments.Allocate(size_t{1} << 62),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("failed")));
}

// A segment in use at a fork() is the child's too: the parent, freeing
// it, never hands it out again (the child still sees what it holds).
TEST(SharedSegmentsTest, AParentNeverReusesASegmentInUseAtAFork) {
  SharedSegments segments(size_t{64} << 20);
  ASSERT_OK_AND_ASSIGN(std::byte* live, segments.Allocate(size_t{1} << 20));
  std::memset(live, 3, size_t{1} << 20);
  const uint64_t token = segments.Find(live, 1)->token;
  int go_pipe[2];
  ASSERT_EQ(pipe(go_pipe), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char go;
    if (read(go_pipe[0], &go, 1) != 1) _exit(1);
    // The parent freed and allocated again: our bytes are as they were.
    _exit(live[12345] == std::byte{3} && live[0] == std::byte{3} ? 0 : 2);
  }
  EXPECT_TRUE(segments.Release(live));
  EXPECT_EQ(segments.stats().pooled_bytes, 0);
  ASSERT_OK_AND_ASSIGN(std::byte* next, segments.Allocate(size_t{1} << 20));
  EXPECT_NE(segments.Find(next, 1)->token, token);
  std::memset(next, 9, size_t{1} << 20);
  ASSERT_EQ(write(go_pipe[1], "x", 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  // A segment made after the fork is pooled as usual.
  EXPECT_TRUE(segments.Release(next));
  EXPECT_EQ(segments.stats().pooled_bytes, int64_t{1} << 20);
  close(go_pipe[0]);
  close(go_pipe[1]);
}

// A child after fork() shares its parent's segments: it may free what it
// inherited, but never hands a parent's segment out again or publishes it.
TEST(SharedSegmentsTest, AChildNeitherReusesNorPublishesItsParentsSegments) {
  SharedSegments segments(size_t{64} << 20);
  ASSERT_OK_AND_ASSIGN(std::byte* pooled, segments.Allocate(size_t{1} << 20));
  ASSERT_OK_AND_ASSIGN(std::byte* live, segments.Allocate(size_t{1} << 20));
  const uint64_t pooled_token = segments.Find(pooled, 1)->token;
  segments.Release(pooled);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int code = 0;
    if (segments.Find(live, 1).has_value()) code |= 1;
    absl::StatusOr<std::byte*> mine = segments.Allocate(size_t{1} << 20);
    // (It may lie where the parent's pooled one was mapped: the child
    // unmapped that.)
    const std::optional<SegmentRef> ref =
        mine.ok() ? segments.Find(*mine, 1) : std::nullopt;
    if (!ref.has_value()) code |= 2;
    if (ref.has_value() && ref->token == pooled_token) code |= 4;
    segments.Release(live);  // unmapped here, the parent's stays
    if (segments.stats().reused != 0) code |= 8;
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // The parent's segments are as they were.
  live[0] = std::byte{1};
  EXPECT_TRUE(segments.Find(live, 1).has_value());
  ASSERT_OK_AND_ASSIGN(std::byte* again, segments.Allocate(size_t{1} << 20));
  EXPECT_EQ(again, pooled);
  segments.Release(again);
  segments.Release(live);
}

}  // namespace
}  // namespace rdmaflow::collectives
