// ProcessIdentity's wire format (strict: it comes from a peer) and the rule
// for when a peer's pid may be checked.
#include "rdma/ucx/peer_liveness.h"

#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::rdma::ucx {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

ProcessIdentity Sample() {
  ProcessIdentity identity;
  identity.pid = 4242;
  identity.start_time = 123456789;
  identity.boot_id = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
  identity.pid_namespace = {4, 4026531836};
  return identity;
}

TEST(ProcessIdentityTest, RoundTrips) {
  const ProcessIdentity identity = Sample();
  const std::string bytes = identity.Encode();
  ASSERT_EQ(bytes.size(), ProcessIdentity::kEncodedSize);
  ASSERT_OK_AND_ASSIGN(ProcessIdentity decoded, ProcessIdentity::Decode(bytes));
  EXPECT_EQ(decoded.pid, identity.pid);
  EXPECT_EQ(decoded.start_time, identity.start_time);
  EXPECT_EQ(decoded.boot_id, identity.boot_id);
  EXPECT_EQ(decoded.pid_namespace, identity.pid_namespace);
}

TEST(ProcessIdentityTest, SelfRoundTrips) {
  const ProcessIdentity self = SelfIdentity();
  EXPECT_EQ(self.pid, static_cast<uint32_t>(getpid()));
  ASSERT_OK_AND_ASSIGN(ProcessIdentity decoded,
                       ProcessIdentity::Decode(self.Encode()));
  EXPECT_EQ(decoded.pid_namespace, self.pid_namespace);
  EXPECT_EQ(decoded.start_time, self.start_time);
}

TEST(ProcessIdentityTest, DecodeRejectsMalformedBytes) {
  const std::string good = Sample().Encode();
  EXPECT_THAT(ProcessIdentity::Decode(""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bytes")));
  EXPECT_THAT(ProcessIdentity::Decode(good.substr(1)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ProcessIdentity::Decode(good + "x"),
              StatusIs(absl::StatusCode::kInvalidArgument));

  ProcessIdentity zero_pid = Sample();
  zero_pid.pid = 0;
  EXPECT_THAT(ProcessIdentity::Decode(zero_pid.Encode()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("pid")));
  ProcessIdentity huge_pid = Sample();
  huge_pid.pid = 0xFFFFFFFFu;
  EXPECT_THAT(ProcessIdentity::Decode(huge_pid.Encode()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("pid")));

  std::string bad_boot = good;
  bad_boot[12] = 'Z';  // The boot id's first character.
  EXPECT_THAT(
      ProcessIdentity::Decode(bad_boot),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("boot id")));

  ProcessIdentity half_namespace = Sample();
  half_namespace.pid_namespace = {4, 0};
  EXPECT_THAT(
      ProcessIdentity::Decode(half_namespace.Encode()),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("namespace")));

  // An unknown boot id (blank) is valid: such a peer is never watched.
  ProcessIdentity blank_boot = Sample();
  blank_boot.boot_id = std::string(ProcessIdentity::kBootIdSize, ' ');
  EXPECT_TRUE(ProcessIdentity::Decode(blank_boot.Encode()).ok());
}

TEST(CanWatchProcessTest, OnlySameHostAndPidNamespaceWithTrustedProc) {
  const ProcessIdentity self = Sample();
  ProcessIdentity peer = Sample();
  peer.pid = 77;
  EXPECT_TRUE(CanWatchProcess(self, peer));

  ProcessIdentity other_host = peer;
  other_host.boot_id = "11111111-2222-3333-4444-555555555555";
  EXPECT_FALSE(CanWatchProcess(self, other_host));

  ProcessIdentity other_namespace = peer;  // Another container.
  other_namespace.pid_namespace.inode += 1;
  EXPECT_FALSE(CanWatchProcess(self, other_namespace));

  ProcessIdentity foreign_proc = peer;  // Its /proc is not its namespace's.
  foreign_proc.start_time = 0;
  EXPECT_FALSE(CanWatchProcess(self, foreign_proc));
  ProcessIdentity self_foreign_proc = self;
  self_foreign_proc.start_time = 0;
  EXPECT_FALSE(CanWatchProcess(self_foreign_proc, peer));

  ProcessIdentity unknown = self;
  unknown.boot_id = std::string(ProcessIdentity::kBootIdSize, ' ');
  EXPECT_FALSE(CanWatchProcess(unknown, unknown));
  unknown = self;
  unknown.pid_namespace = {};
  EXPECT_FALSE(CanWatchProcess(unknown, unknown));
}

TEST(IsProcessGoneTest, SeesLiveAndReapedProcesses) {
  const ProcessIdentity self = SelfIdentity();
  if (!CanWatchProcess(self, self)) {
    GTEST_SKIP() << "this process's /proc is not its PID namespace's";
  }
  EXPECT_FALSE(IsProcessGone(self));
  ProcessIdentity older = self;  // Same pid, another start time.
  older.start_time -= 1;
  EXPECT_TRUE(IsProcessGone(older));

  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  ProcessIdentity dead = self;
  dead.pid = static_cast<uint32_t>(child);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  EXPECT_TRUE(IsProcessGone(dead));
}

TEST(StatSaysGoneTest, ReadsStateFlagsAndStartTime) {
  // A /proc/<pid>/stat line: the name may hold spaces and parentheses.
  auto line = [](char state, uint64_t flags, uint64_t start) {
    return absl::StrCat("4242 (a (b) c) ", std::string(1, state),
                        " 1 4242 4242 0 -1 ", flags,
                        " 0 0 0 0 0 0 0 0 20 0 1 0 ", start,
                        " 1000 100 18446744073709551615");
  };
  EXPECT_FALSE(StatSaysGone(line('S', 0x400000, 777), 777));
  EXPECT_FALSE(StatSaysGone(line('R', 0x400040, 777), 777));
  EXPECT_TRUE(StatSaysGone(line('Z', 0x400000, 777), 777));
  EXPECT_TRUE(StatSaysGone(line('X', 0x400000, 777), 777));
  // Exiting (PF_EXITING) while still running: its files may be closed.
  EXPECT_TRUE(StatSaysGone(line('R', 0x400004, 777), 777));
  EXPECT_TRUE(StatSaysGone(line('S', 0x400000, 778), 777));  // a newer process
  EXPECT_TRUE(StatSaysGone("", 777));
  EXPECT_TRUE(StatSaysGone("4242 (truncated) S 1 2", 777));
  EXPECT_TRUE(StatSaysGone(line('S', 0, 777).substr(0, 40), 777));
}

}  // namespace
}  // namespace rdmaflow::rdma::ucx
