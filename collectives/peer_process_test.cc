// File: peer_process_test.cc
#include "collectives/peer_process.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::collectives {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::vector<std::byte> Pattern(size_t bytes, int seed) {
  std::vector<std::byte> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<std::byte>((i * 131 + seed) & 0xff);
  return data;
}

TEST(ProcessTokenTest, FormatsAndParsesBack) {
  const ProcessToken own = OwnProcessToken();
  EXPECT_EQ(own.pid, getpid());
  ASSERT_OK_AND_ASSIGN(ProcessToken back, ParseProcessToken(FormatProcessToken(own)));
  EXPECT_EQ(back.pid, own.pid);
  EXPECT_EQ(back.address, own.address);
  EXPECT_EQ(back.token[0], own.token[0]);
  EXPECT_EQ(back.token[1], own.token[1]);
  // The same token on every call in one process.
  EXPECT_EQ(OwnProcessToken().token[0], own.token[0]);
}

TEST(ProcessTokenTest, RefusesOtherText) {
  for (const char* text : {"", "pid=1", "pid=0 at=10 token=1.2", "pid=5 at=0 token=1.2",
                           "pid=5 at=zz token=1.2", "pid=5 at=10 token=12",
                           "pid=5 at=10 token=1.2 extra", "at=10 pid=5 token=1.2"}) {
    EXPECT_THAT(ParseProcessToken(text), StatusIs(absl::StatusCode::kInvalidArgument))
        << text;
  }
}

TEST(PeerProcessTest, ReadsOurOwnMemory) {
  ASSERT_OK_AND_ASSIGN(PeerProcess self, PeerProcess::Open(OwnProcessToken(), "rank 0"));
  const std::vector<std::byte> source = Pattern(3 << 20, 7);
  std::vector<std::byte> copy(source.size());
  ASSERT_OK(self.Read(reinterpret_cast<uintptr_t>(source.data()), source.size(), copy.data()));
  EXPECT_EQ(copy, source);
  EXPECT_OK(self.Read(reinterpret_cast<uintptr_t>(source.data()), 0, nullptr));
}

TEST(PeerProcessTest, AnotherTokenAtThatPidIsRefusedAtOpen) {
  ProcessToken forged = OwnProcessToken();
  forged.token[1] ^= 1;
  EXPECT_THAT(PeerProcess::Open(forged, "rank 3"),
              StatusIs(absl::StatusCode::kUnimplemented,
                       AllOf(HasSubstr("rank 3"), HasSubstr("another process"))));
  ProcessToken unmapped = OwnProcessToken();
  unmapped.address = 8;  // page zero
  EXPECT_THAT(PeerProcess::Open(unmapped, "rank 3"),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("rank 3")));
}

TEST(PeerProcessTest, ANonexistentPidIsRefusedAtOpen) {
  ProcessToken gone = OwnProcessToken();
  gone.pid = (int64_t{1} << 22) + 1;  // above the kernel's largest pid_max
  EXPECT_THAT(PeerProcess::Open(gone, "rank 1"),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("no such process")));
}

TEST(PeerProcessTest, ForgedAddressesAreDataLoss) {
  ASSERT_OK_AND_ASSIGN(PeerProcess self, PeerProcess::Open(OwnProcessToken(), "rank 0"));
  std::vector<std::byte> copy(4096);
  EXPECT_THAT(self.Read(0, 16, copy.data()), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(self.Read(UINT64_MAX - 8, 16, copy.data()),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("outside any address space")));
  // Mapped in no process: page zero.
  EXPECT_THAT(self.Read(64, 4096, copy.data()),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("are mapped")));
  // Its first part mapped, the rest not: never a partial read taken as whole.
  const long page = sysconf(_SC_PAGESIZE);
  void* pages = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
  ASSERT_NE(pages, MAP_FAILED);
  ASSERT_EQ(munmap(static_cast<char*>(pages) + page, page), 0);
  std::vector<std::byte> two(2 * page);
  EXPECT_THAT(self.Read(reinterpret_cast<uintptr_t>(pages), two.size(), two.data()),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("are mapped")));
  munmap(pages, page);
}

// A child process: its memory read with one copy, then an error once it is
// gone.
TEST(PeerProcessTest, ReadsAChildAndSeesItGo) {
  const std::vector<std::byte> source = Pattern(1 << 20, 3);
  int token_pipe[2], go_pipe[2];
  ASSERT_EQ(pipe(token_pipe), 0);
  ASSERT_EQ(pipe(go_pipe), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // A token of its own (its pid differs), then waits to be told to go.
    const std::string text = FormatProcessToken(OwnProcessToken());
    if (write(token_pipe[1], text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      _exit(1);
    }
    close(token_pipe[1]);
    char go;
    _exit(read(go_pipe[0], &go, 1) == 1 ? 0 : 2);
  }
  close(token_pipe[1]);
  close(go_pipe[0]);
  std::string text(256, '\0');
  ssize_t got = 0;
  for (ssize_t n; (n = read(token_pipe[0], text.data() + got, text.size() - got)) > 0;) got += n;
  text.resize(static_cast<size_t>(std::max<ssize_t>(got, 0)));
  ASSERT_OK_AND_ASSIGN(ProcessToken token, ParseProcessToken(text));
  EXPECT_EQ(token.pid, child);
  EXPECT_NE(token.token[0], OwnProcessToken().token[0]);
  ASSERT_OK_AND_ASSIGN(PeerProcess peer, PeerProcess::Open(token, "rank 1"));
  std::vector<std::byte> copy(source.size());
  // The child's copy of `source` lies at the same address in its memory.
  ASSERT_OK(peer.Read(reinterpret_cast<uintptr_t>(source.data()), source.size(), copy.data()));
  EXPECT_EQ(copy, source);
  ASSERT_EQ(write(go_pipe[1], "x", 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_THAT(peer.Read(reinterpret_cast<uintptr_t>(source.data()), 64, copy.data()),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("gone")));
  close(token_pipe[0]);
  close(go_pipe[1]);
}

}  // namespace
}  // namespace rdmaflow::collectives
