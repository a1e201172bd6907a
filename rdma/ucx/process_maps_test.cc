// File: process_maps_test.cc
// Ranges checked against a process's shared mappings: inside one line,
// across two adjacent ones (refused: two mappings are not one segment),
// past the end, wrapping, empty, private (code, heap, stack: refused); and
// against this process's own maps.
#include "rdma/ucx/process_maps.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace rdmaflow::rdma::ucx {
namespace {

constexpr char kMaps[] =
    "00400000-00452000 r-xp 00000000 08:02 173521 /usr/bin/dbus-daemon\n"
    "7f1c2a000000-7f1c2a041000 rw-s 00000000 00:01 1234 /dev/shm/ucx_shm_posix_1\n"
    "7f1c2a041000-7f1c2a042000 rw-p 00000000 00:00 0\n"
    "garbage line\n";

TEST(ProcessMapsTest, ARangeMustLieInsideOneLine) {
  EXPECT_TRUE(InsideOneSharedMapping(kMaps, 0x7f1c2a000000, 0x41000));
  EXPECT_TRUE(InsideOneSharedMapping(kMaps, 0x7f1c2a040ff8, 8));
  EXPECT_FALSE(InsideOneSharedMapping(kMaps, 0x7f1c2a040ff8, 9));  // into the next line
  EXPECT_FALSE(InsideOneSharedMapping(kMaps, 0x7f1c29fffff8, 16));  // starts before
  EXPECT_FALSE(InsideOneSharedMapping(kMaps, 0x10, 8));  // nothing there
  EXPECT_FALSE(InsideOneSharedMapping(kMaps, 0x7f1c2a000000, 0));
  EXPECT_FALSE(InsideOneSharedMapping(kMaps, UINTPTR_MAX - 3, 8));  // wraps
  EXPECT_FALSE(InsideOneSharedMapping("", 0x400000, 8));
  // Private mappings (code, heap, stack) never count.
  EXPECT_FALSE(InsideOneSharedMapping(kMaps, 0x00400000, 8));
  EXPECT_FALSE(InsideOneSharedMapping(kMaps, 0x7f1c2a041000, 8));
}

TEST(ProcessMapsTest, OwnMappingsAreRead) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* mapped = mmap(nullptr, 4 * page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mapped, MAP_FAILED);
  auto* base = static_cast<std::byte*>(mapped);
  // Unmapping the last page leaves a hole right after the rest.
  ASSERT_EQ(munmap(base + 3 * page, page), 0);
  EXPECT_TRUE(InsideOwnSharedMapping(base, 3 * page));
  EXPECT_TRUE(InsideOwnSharedMapping(base + page, page));
  EXPECT_FALSE(InsideOwnSharedMapping(base, 3 * page + 1));
  munmap(base, 3 * page);
  // Our heap is private.
  std::vector<char> heap(64);
  EXPECT_FALSE(InsideOwnSharedMapping(heap.data(), heap.size()));
}

}  // namespace
}  // namespace rdmaflow::rdma::ucx
