// File: segment_maps_test.cc
#include "collectives/segment_maps.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "collectives/shared_segments.h"
#include "common/status_matchers.h"
#include "common/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::collectives {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::rdmaflow::testing::StatusIs;

constexpr size_t kUnbounded = SIZE_MAX;

TEST(SegmentMapsTest, MapsASegmentOnceAndKeepsIt) {
  SharedSegments segments(0);
  ASSERT_OK_AND_ASSIGN(std::byte* data, segments.Allocate(size_t{1} << 20));
  std::memset(data, 5, size_t{1} << 20);
  const SegmentRef ref = *segments.Find(data, 1);
  SegmentMaps maps(4, kUnbounded);
  ASSERT_OK_AND_ASSIGN(absl::Span<const std::byte> mapped,
                       maps.Map(getpid(), ref.fd, ref.token, "rank 1", /*epoch=*/1));
  ASSERT_EQ(mapped.size(), size_t{1} << 20);
  EXPECT_NE(mapped.data(), data);  // a mapping of its own
  EXPECT_EQ(mapped[12345], std::byte{5});
  data[12345] = std::byte{9};  // shared, not a copy
  EXPECT_EQ(mapped[12345], std::byte{9});
  ASSERT_OK_AND_ASSIGN(absl::Span<const std::byte> again,
                       maps.Map(getpid(), ref.fd, ref.token, "rank 1", /*epoch=*/1));
  EXPECT_EQ(again.data(), mapped.data());
  EXPECT_EQ(maps.stats().mapped, 1);
  EXPECT_EQ(maps.stats().hits, 1);
  segments.Release(data);
}

TEST(SegmentMapsTest, KeepsAtMostItsCapacityDroppingTheLeastRecentlyUsed) {
  SharedSegments segments(0);
  SegmentMaps maps(2, kUnbounded);
  std::vector<std::byte*> buffers;
  std::vector<SegmentRef> refs;
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK_AND_ASSIGN(std::byte* data, segments.Allocate(4096));
    buffers.push_back(data);
    refs.push_back(*segments.Find(data, 1));
  }
  ASSERT_OK(maps.Map(getpid(), refs[0].fd, refs[0].token, "rank 1", /*epoch=*/1).status());
  ASSERT_OK(maps.Map(getpid(), refs[1].fd, refs[1].token, "rank 1", /*epoch=*/2).status());
  // 0 used again; then 2 drops 1.
  ASSERT_OK(maps.Map(getpid(), refs[0].fd, refs[0].token, "rank 1", /*epoch=*/3).status());
  ASSERT_OK(maps.Map(getpid(), refs[2].fd, refs[2].token, "rank 1", /*epoch=*/4).status());
  EXPECT_EQ(maps.stats().evicted, 1);
  ASSERT_OK(maps.Map(getpid(), refs[0].fd, refs[0].token, "rank 1", /*epoch=*/5).status());
  EXPECT_EQ(maps.stats().hits, 2);
  ASSERT_OK(maps.Map(getpid(), refs[1].fd, refs[1].token, "rank 1", /*epoch=*/6).status());
  EXPECT_EQ(maps.stats().mapped, 4);
  for (std::byte* data : buffers) segments.Release(data);
}

// Past its bytes, the least recently used mappings go, but never one of
// the epoch under way (its pointers are in use): 4 KiB segments, 8 KiB kept.
TEST(SegmentMapsTest, KeepsAtMostItsBytesButNeverDropsTheEpochUnderWay) {
  SharedSegments segments(0);
  SegmentMaps maps(16, 8192);
  std::vector<std::byte*> buffers;
  std::vector<SegmentRef> refs;
  for (int i = 0; i < 4; ++i) {
    ASSERT_OK_AND_ASSIGN(std::byte* data, segments.Allocate(4096));
    buffers.push_back(data);
    refs.push_back(*segments.Find(data, 1));
  }
  std::vector<const std::byte*> epoch1;
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK_AND_ASSIGN(absl::Span<const std::byte> mapped,
                         maps.Map(getpid(), refs[i].fd, refs[i].token, "rank 1", 1));
    epoch1.push_back(mapped.data());
  }
  EXPECT_EQ(maps.stats().evicted, 0);  // 12 KiB, all of the epoch under way
  for (const std::byte* mapped : epoch1) EXPECT_EQ(mapped[100], std::byte{0});  // still mapped
  ASSERT_OK(maps.Map(getpid(), refs[3].fd, refs[3].token, "rank 1", 2).status());
  EXPECT_EQ(maps.stats().evicted, 2);  // 16 KiB: the two oldest of epoch 1 go
  ASSERT_OK(maps.Map(getpid(), refs[2].fd, refs[2].token, "rank 1", 2).status());
  EXPECT_EQ(maps.stats().hits, 1);
  ASSERT_OK(maps.Map(getpid(), refs[0].fd, refs[0].token, "rank 1", 2).status());
  EXPECT_EQ(maps.stats().mapped, 5);
  for (std::byte* data : buffers) segments.Release(data);
}

TEST(SegmentMapsTest, RefusesWhatIsNotThePublishedSealedSegment) {
  SharedSegments segments(0);
  ASSERT_OK_AND_ASSIGN(std::byte* data, segments.Allocate(4096));
  const SegmentRef ref = *segments.Find(data, 1);
  SegmentMaps maps(4, kUnbounded);
  // Another token for that descriptor.
  EXPECT_THAT(maps.Map(getpid(), ref.fd, ref.token + 1, "rank 3", /*epoch=*/1),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("rank 3"), HasSubstr("not its published segment"))));
  // A memfd with the right name but no seals (it could shrink under us).
  const uint64_t token = 0x1234;
  UniqueFd unsealed(memfd_create(SegmentName(token).c_str(), MFD_CLOEXEC));
  ASSERT_GE(unsealed.get(), 0);
  ASSERT_EQ(ftruncate(unsealed.get(), 4096), 0);
  EXPECT_THAT(maps.Map(getpid(), unsealed.get(), token, "rank 3", /*epoch=*/1),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("not sealed")));
  // No such descriptor; a descriptor that is no memfd; forged numbers.
  EXPECT_THAT(maps.Map(getpid(), 1 << 30, ref.token, "rank 3", /*epoch=*/1),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("cannot open")));
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  EXPECT_THAT(maps.Map(getpid(), pipe_fds[0], ref.token, "rank 3", /*epoch=*/1),
              StatusIs(absl::StatusCode::kDataLoss));
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  EXPECT_THAT(maps.Map(-1, ref.fd, ref.token, "rank 3", /*epoch=*/1),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("forged")));
  EXPECT_THAT(maps.Map(getpid(), int64_t{1} << 40, ref.token, "rank 3", /*epoch=*/1),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("forged")));
  EXPECT_EQ(maps.stats().refused, 6);
  EXPECT_EQ(maps.stats().mapped, 0);
  segments.Release(data);
}

// A descriptor that would block an open() (a FIFO no one writes), and
// sealed memfds of the right name that are too large to map.
TEST(SegmentMapsTest, NeitherBlocksOnAFifoNorMapsAHugeSegment) {
  char dir[] = "/tmp/segment_maps_testXXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string fifo = std::string(dir) + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  UniqueFd reader(open(fifo.c_str(), O_RDONLY | O_NONBLOCK));
  ASSERT_GE(reader.get(), 0);
  SegmentMaps maps(4, kUnbounded);
  EXPECT_THAT(maps.Map(getpid(), reader.get(), 1, "rank 2", /*epoch=*/1),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("rank 2")));
  unlink(fifo.c_str());
  rmdir(dir);
  const uint64_t token = 0x77;
  UniqueFd huge(memfd_create(SegmentName(token).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  ASSERT_GE(huge.get(), 0);
  ASSERT_EQ(ftruncate(huge.get(), static_cast<off_t>(kMaxSegmentBytes + 4096)), 0);
  ASSERT_EQ(fcntl(huge.get(), F_ADD_SEALS, F_SEAL_SHRINK), 0);
  EXPECT_THAT(maps.Map(getpid(), huge.get(), token, "rank 2", /*epoch=*/1),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("outside 1..")));
  // A large one within the bound maps without faulting its pages in.
  const uint64_t sparse_token = 0x78;
  UniqueFd sparse(
      memfd_create(SegmentName(sparse_token).c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  ASSERT_GE(sparse.get(), 0);
  ASSERT_EQ(ftruncate(sparse.get(), off_t{64} << 30), 0);
  ASSERT_EQ(fcntl(sparse.get(), F_ADD_SEALS, F_SEAL_SHRINK), 0);
  ASSERT_OK_AND_ASSIGN(absl::Span<const std::byte> mapped,
                       maps.Map(getpid(), sparse.get(), sparse_token, "rank 2", /*epoch=*/1));
  EXPECT_EQ(mapped.size(), size_t{64} << 30);
  EXPECT_EQ(mapped[size_t{40} << 30], std::byte{0});
}

// Another process's segment, read where it lies; after it exits, the
// mapping still holds what it wrote, and a new Map() of it fails.
TEST(SegmentMapsTest, MapsAChildsSegment) {
  int ref_pipe[2], go_pipe[2];
  ASSERT_EQ(pipe(ref_pipe), 0);
  ASSERT_EQ(pipe(go_pipe), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    SharedSegments segments(0);
    absl::StatusOr<std::byte*> data = segments.Allocate(size_t{1} << 20);
    if (!data.ok()) _exit(1);
    for (size_t i = 0; i < (size_t{1} << 20); ++i) (*data)[i] = std::byte(i % 251);
    const SegmentRef ref = *segments.Find(*data, 1);
    if (write(ref_pipe[1], &ref, sizeof(ref)) != sizeof(ref)) _exit(2);
    char go;
    _exit(read(go_pipe[0], &go, 1) == 1 ? 0 : 3);
  }
  close(ref_pipe[1]);
  close(go_pipe[0]);
  SegmentRef ref;
  ASSERT_EQ(read(ref_pipe[0], &ref, sizeof(ref)), static_cast<ssize_t>(sizeof(ref)));
  SegmentMaps maps(4, kUnbounded);
  ASSERT_OK_AND_ASSIGN(absl::Span<const std::byte> mapped,
                       maps.Map(child, ref.fd, ref.token, "rank 1", /*epoch=*/1));
  ASSERT_EQ(mapped.size(), size_t{1} << 20);
  for (size_t i = 0; i < mapped.size(); i += 4093) EXPECT_EQ(mapped[i], std::byte(i % 251));
  ASSERT_EQ(write(go_pipe[1], "x", 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(mapped[4093], std::byte(4093 % 251));
  // Gone: no such descriptor (or, were the pid reused at once, another
  // process's, which is not the segment).
  SegmentMaps fresh(4, kUnbounded);
  const absl::Status gone =
      fresh.Map(child, ref.fd, ref.token, "rank 1", /*epoch=*/1).status();
  EXPECT_TRUE(gone.code() == absl::StatusCode::kUnavailable ||
              gone.code() == absl::StatusCode::kDataLoss)
      << gone;
  EXPECT_THAT(gone.message(), HasSubstr("rank 1"));
  close(ref_pipe[0]);
  close(go_pipe[1]);
}

}  // namespace
}  // namespace rdmaflow::collectives
