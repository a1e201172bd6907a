// Ranks in separate PID namespaces, as two containers on one node: rank 1
// runs under `unshare --pid --fork` (its getpid() is 1; with --mount-proc its
// /proc shows only its own namespace), rank 0 in the test's namespace. They
// exchange data over UCX and keep doing so for three keepalive intervals,
// during which neither may declare the other dead; then the test SIGKILLs one
// of them, and the survivor's operations must fail, naming the peer, within
// the documented bound (two keepalive intervals, docs/rdma.md "Dead peers").
//
// The test binary is the launcher: it re-executes itself once per rank
// (RDMAFLOW_PIDNS_RANK set), relays the ranks' addresses and descriptors over
// pipes, and kills the victim. Skips where `unshare --pid --fork` is not
// permitted (no CAP_SYS_ADMIN and no user namespaces).
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "rdma/blocking.h"
#include "rdma/ucx/ucx_transport.h"

namespace rdmaflow::rdma::ucx {
namespace {

constexpr char kRankEnv[] = "RDMAFLOW_PIDNS_RANK";
constexpr char kTlsEnv[] = "RDMAFLOW_PIDNS_TLS";
constexpr char kVictimEnv[] = "RDMAFLOW_PIDNS_VICTIM";  // "1": to be killed.
constexpr char kInFdEnv[] = "RDMAFLOW_PIDNS_IN";
constexpr char kOutFdEnv[] = "RDMAFLOW_PIDNS_OUT";
// Generous bound for "never hangs" (set-up, each blocking operation).
constexpr absl::Duration kTimeout = absl::Seconds(60);
constexpr size_t kSlot = 64 << 10;

const absl::Duration kKeepalive = UcxTransportOptions{}.keepalive_interval;
// docs/rdma.md, "Dead peers": a dead peer's operations fail within two
// keepalive intervals.
const absl::Duration kDetectionBound = 2 * kKeepalive;
// What a loaded machine may add to it: the kill's delivery and the
// survivor's turn on a core (both processes share two cores with another
// test). A missed death would end only at kTimeout.
constexpr absl::Duration kSchedulingSlack = absl::Milliseconds(1500);

int64_t MonotonicNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// --- Length-prefixed messages over pipes ------------------------------------

bool WriteAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= n;
  }
  return true;
}

absl::Status SendMessage(int fd, const std::string& message) {
  const uint64_t size = message.size();
  if (!WriteAll(fd, &size, 8) || !WriteAll(fd, message.data(), size)) {
    return absl::UnavailableError(
        absl::StrCat("writing to pipe fd ", fd, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status ReadAll(int fd, char* data, size_t size, absl::Time deadline,
                     absl::string_view what) {
  while (size > 0) {
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms <= 0) {
      return absl::DeadlineExceededError(absl::StrCat("waiting for ", what));
    }
    pollfd pfd{fd, POLLIN, 0};
    const int ready = poll(&pfd, 1, static_cast<int>(left_ms));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    const ssize_t n = read(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::UnavailableError(
          absl::StrCat("pipe closed while waiting for ", what));
    }
    data += n;
    size -= n;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReceiveMessage(int fd, absl::Time deadline,
                                           absl::string_view what) {
  uint64_t size = 0;
  RETURN_IF_ERROR(
      ReadAll(fd, reinterpret_cast<char*>(&size), 8, deadline, what));
  if (size > (1 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("oversized message (", size, " bytes) for ", what));
  }
  std::string message(size, '\0');
  RETURN_IF_ERROR(ReadAll(fd, message.data(), size, deadline, what));
  return message;
}

// --- One rank ----------------------------------------------------------------

uint8_t Stamp(int rank, uint64_t round, size_t i) {
  return static_cast<uint8_t>(rank * 71 + round * 13 + i * 7);
}

absl::Status RunRank(int rank, const std::string& tls, bool victim, int in,
                     int out) {
  const int peer = 1 - rank;
  UcxTransportOptions options;
  options.rank = rank;
  options.tls = tls;
  ASSIGN_OR_RETURN(std::unique_ptr<UcxTransport> transport,
                   UcxTransport::Create(options));
  // Slot r of `inbox` receives rank r's writes.
  ASSIGN_OR_RETURN(MemoryRegion inbox, transport->Allocate(2 * kSlot));
  ASSIGN_OR_RETURN(MemoryRegion local, transport->Allocate(2 * kSlot));
  RETURN_IF_ERROR(SendMessage(out, transport->address()));
  RETURN_IF_ERROR(SendMessage(out, inbox.descriptor().Serialize()));
  const absl::Time setup_deadline = absl::Now() + kTimeout;
  ASSIGN_OR_RETURN(std::string peer_address,
                   ReceiveMessage(in, setup_deadline, "the peer's address"));
  ASSIGN_OR_RETURN(std::string peer_descriptor,
                   ReceiveMessage(in, setup_deadline, "the peer's region"));
  ASSIGN_OR_RETURN(RemoteRegion peer_inbox,
                   RemoteRegion::Parse(peer_descriptor));
  ASSIGN_OR_RETURN(std::unique_ptr<Endpoint> endpoint,
                   transport->Connect(PeerInfo{peer, peer_address}));

  // Both alive: write a stamped slot with a notification, read it back,
  // compare; for three keepalive intervals (and until the peer's writes have
  // arrived too). Every operation must succeed: neither rank may think the
  // other is dead.
  const LocalSlice src{&local, 0, kSlot};
  const LocalSlice readback{&local, kSlot, kSlot};
  const RemoteSlice dst{&peer_inbox, rank * kSlot, kSlot};
  const absl::Time soak_end = absl::Now() + 3 * kKeepalive;
  const absl::Time soak_deadline = absl::Now() + kTimeout;
  int heard = 0;
  for (uint64_t round = 0; absl::Now() < soak_end || heard == 0; ++round) {
    if (absl::Now() > soak_deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "rank ", rank, " heard no notification from rank ", peer));
    }
    for (size_t i = 0; i < kSlot; ++i) {
      local.data()[i] = std::byte{Stamp(rank, round, i)};
    }
    const absl::Time deadline = absl::Now() + kTimeout;
    RETURN_IF_ERROR(Write(*transport, *endpoint, src, dst,
                          static_cast<uint32_t>(round), deadline));
    RETURN_IF_ERROR(Read(*transport, *endpoint, readback, dst, deadline));
    if (std::memcmp(local.data(), local.data() + kSlot, kSlot) != 0) {
      return absl::DataLossError(absl::StrCat("rank ", rank, ": round ", round,
                                              " read back other bytes"));
    }
    while (std::optional<Notification> note = transport->PollNotification()) {
      if (note->peer_rank != peer) {
        return absl::InternalError(absl::StrCat(
            "rank ", rank, ": notification from rank ", note->peer_rank));
      }
      ++heard;
    }
  }
  RETURN_IF_ERROR(SendMessage(out, "ready"));

  if (victim) {
    // Serve the survivor's operations until killed. (The victim posts
    // nothing more: UCX 1.13 aborts the process that acknowledges an
    // AM-emulated put, as TCP's are, to a peer that has just died,
    // ucp_request.inl:346 "unexpected error"; that is not what this test is
    // about.)
    const absl::Time deadline = absl::Now() + kTimeout;
    while (absl::Now() < deadline)
      RETURN_IF_ERROR(transport->Progress().status());
    return absl::DeadlineExceededError(
        absl::StrCat("rank ", rank, " was never killed"));
  }
  // The survivor writes until its writes fail with kUnavailable naming the
  // peer.
  for (uint64_t round = 0;; ++round) {
    absl::Status status =
        Write(*transport, *endpoint, src, dst, static_cast<uint32_t>(round),
              absl::Now() + kTimeout);
    if (status.ok()) {
      while (transport->PollNotification().has_value()) {
      }
      continue;
    }
    const int64_t detected = MonotonicNanos();
    if (absl::IsUnavailable(status) &&
        absl::StrContains(status.message(), absl::StrCat("rank ", peer))) {
      std::fprintf(stderr, "rank %d: %s\n", rank, status.ToString().c_str());
      return SendMessage(out, absl::StrCat("detected ", detected));
    }
    return status;
  }
}

int RankMain(int rank) {
  int in = -1, out = -1;
  const char* tls = std::getenv(kTlsEnv);
  if (!absl::SimpleAtoi(std::getenv(kInFdEnv), &in) ||
      !absl::SimpleAtoi(std::getenv(kOutFdEnv), &out) || tls == nullptr) {
    std::fprintf(stderr, "rank %d: missing %s/%s/%s\n", rank, kInFdEnv,
                 kOutFdEnv, kTlsEnv);
    return 2;
  }
  const char* victim = std::getenv(kVictimEnv);
  absl::Status status = RunRank(
      rank, tls, victim != nullptr && std::string(victim) == "1", in, out);
  if (status.ok()) return 0;
  std::fprintf(stderr, "rank %d: %s\n", rank, status.ToString().c_str());
  SendMessage(out, absl::StrCat("error ", status.ToString())).IgnoreError();
  return 1;
}

// --- The launcher ------------------------------------------------------------

struct Case {
  std::string name;
  std::string tls;
  bool mount_proc;       // Rank 1 gets its own /proc, as in a container.
  bool kill_namespaced;  // The victim: rank 1 (true) or rank 0.
};

std::vector<std::string> UnshareArgs(bool mount_proc) {
  std::vector<std::string> args = {"unshare", "--pid", "--fork",
                                   "--kill-child=SIGKILL"};
  if (mount_proc) args.push_back("--mount-proc");
  return args;
}

// Runs `argv` with `env` added and `keep` fds inherited; returns its pid.
pid_t Spawn(const std::vector<std::string>& argv,
            const std::vector<std::pair<std::string, std::string>>& env,
            const std::vector<int>& keep) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // Never outlive the launcher.
  for (int fd : keep) fcntl(fd, F_SETFD, 0);
  for (const auto& [key, value] : env) setenv(key.c_str(), value.c_str(), 1);
  std::vector<char*> args;
  for (const std::string& arg : argv)
    args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  _exit(127);
}

// Whether `unshare --pid --fork` works here; the reason if not.
absl::Status CheckUnshare(bool mount_proc) {
  std::vector<std::string> argv = UnshareArgs(mount_proc);
  argv.push_back("true");
  const pid_t pid = Spawn(argv, {}, {});
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) {
    return absl::UnavailableError("cannot start unshare");
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    return absl::UnavailableError("`unshare` (util-linux) is not installed");
  }
  return absl::UnavailableError(absl::StrCat(
      "`", absl::StrJoin(argv, " "),
      "` is not permitted here (it needs CAP_SYS_ADMIN or unprivileged user "
      "namespaces), so ranks in separate PID namespaces cannot be tested"));
}

// The child process of `parent` (unshare forks exactly one), found through
// /proc: it is the process to kill, its pid in our namespace.
pid_t FindChild(pid_t parent) {
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return -1;
  pid_t found = -1;
  while (dirent* entry = readdir(dir)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &pid)) continue;
    std::ifstream file(absl::StrCat("/proc/", pid, "/stat"));
    std::string line;
    if (!std::getline(file, line)) continue;
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::vector<std::string> fields =
        absl::StrSplit(line.substr(close + 2), ' ', absl::SkipEmpty());
    pid_t ppid = 0;
    if (fields.size() > 1 && absl::SimpleAtoi(fields[1], &ppid) &&
        ppid == parent) {
      found = pid;
      break;
    }
  }
  closedir(dir);
  return found;
}

// Two launched ranks, rank 1 under unshare, and the pipes to them.
class Job {
 public:
  ~Job() {
    for (int r = 0; r < 2; ++r) {
      if (pids_[r] > 0) kill(pids_[r], SIGKILL);
    }
    for (int r = 0; r < 2; ++r) {
      if (pids_[r] > 0) waitpid(pids_[r], nullptr, 0);
      for (int fd : {to_[r], from_[r]}) {
        if (fd >= 0) close(fd);
      }
    }
  }

  // Starts both ranks and relays their addresses and regions.
  absl::Status Start(const std::string& tls, bool mount_proc, int victim) {
    char exe[4096] = {0};
    if (readlink("/proc/self/exe", exe, sizeof(exe) - 1) <= 0) {
      return absl::InternalError("readlink /proc/self/exe failed");
    }
    for (int r = 0; r < 2; ++r) {
      int to[2], from[2];
      if (pipe2(to, O_CLOEXEC) != 0 || pipe2(from, O_CLOEXEC) != 0) {
        return absl::InternalError(
            absl::StrCat("pipe2: ", std::strerror(errno)));
      }
      std::vector<std::string> argv;
      if (r == 1) argv = UnshareArgs(mount_proc);
      argv.push_back(exe);
      pids_[r] = Spawn(argv,
                       {{kRankEnv, absl::StrCat(r)},
                        {kTlsEnv, tls},
                        {kVictimEnv, r == victim ? "1" : "0"},
                        {kInFdEnv, absl::StrCat(to[0])},
                        {kOutFdEnv, absl::StrCat(from[1])}},
                       {to[0], from[1]});
      close(to[0]);
      close(from[1]);
      to_[r] = to[1];
      from_[r] = from[0];
      if (pids_[r] < 0) return absl::InternalError("fork failed");
    }
    const absl::Time deadline = absl::Now() + kTimeout;
    std::string address[2], region[2];
    for (int r = 0; r < 2; ++r) {
      ASSIGN_OR_RETURN(address[r], Receive(r, deadline, "address"));
      ASSIGN_OR_RETURN(region[r], Receive(r, deadline, "region"));
    }
    for (int r = 0; r < 2; ++r) {
      RETURN_IF_ERROR(SendMessage(to_[r], address[1 - r]));
      RETURN_IF_ERROR(SendMessage(to_[r], region[1 - r]));
    }
    return absl::OkStatus();
  }

  // The next message from rank `r`; a rank's "error ..." becomes its status.
  absl::StatusOr<std::string> Receive(int r, absl::Time deadline,
                                      absl::string_view what) {
    ASSIGN_OR_RETURN(std::string message,
                     ReceiveMessage(from_[r], deadline,
                                    absl::StrCat("rank ", r, "'s ", what)));
    if (absl::StartsWith(message, "error ")) {
      return absl::AbortedError(
          absl::StrCat("rank ", r, ": ", message.substr(6)));
    }
    return message;
  }

  // The pid, in our namespace, of rank `r` itself (for rank 1, the child of
  // unshare).
  pid_t RankPid(int r) { return r == 0 ? pids_[0] : FindChild(pids_[1]); }

  // Waits for rank `r` (for rank 1, unshare, which exits as its child did).
  int Wait(int r) {
    int status = -1;
    if (waitpid(pids_[r], &status, 0) == pids_[r]) pids_[r] = -1;
    return status;
  }

 private:
  pid_t pids_[2] = {-1, -1};
  int to_[2] = {-1, -1};
  int from_[2] = {-1, -1};
};

class PidNamespaceTest : public ::testing::TestWithParam<Case> {};

TEST_P(PidNamespaceTest, RanksConnectRunAndDetectAKilledPeerWithinTheBound) {
  const Case& c = GetParam();
  if (absl::Status unshare = CheckUnshare(c.mount_proc); !unshare.ok()) {
    GTEST_SKIP() << unshare.message();
  }
  const int victim = c.kill_namespaced ? 1 : 0;
  const int survivor = 1 - victim;
  Job job;
  ASSERT_TRUE(job.Start(c.tls, c.mount_proc, victim).ok());
  // Both exchanged data for three keepalive intervals without a failure.
  const absl::Time deadline = absl::Now() + kTimeout;
  for (int r = 0; r < 2; ++r) {
    absl::StatusOr<std::string> ready = job.Receive(r, deadline, "soak");
    ASSERT_TRUE(ready.ok()) << ready.status();
    ASSERT_EQ(*ready, "ready") << "rank " << r;
  }

  const pid_t victim_pid = job.RankPid(victim);
  ASSERT_GT(victim_pid, 0) << "cannot find the rank under unshare";
  const int64_t killed = MonotonicNanos();
  ASSERT_EQ(kill(victim_pid, SIGKILL), 0);

  absl::StatusOr<std::string> report =
      job.Receive(survivor, absl::Now() + kTimeout,
                  absl::StrCat("detection of the death of rank ", victim));
  ASSERT_TRUE(report.ok()) << report.status();
  std::vector<std::string> words =
      absl::StrSplit(*report, absl::MaxSplits(' ', 1));
  ASSERT_EQ(words.size(), 2u) << *report;
  ASSERT_EQ(words[0], "detected") << *report;
  int64_t detected = 0;
  ASSERT_TRUE(absl::SimpleAtoi(words[1], &detected)) << *report;
  const absl::Duration latency = absl::Nanoseconds(detected - killed);
  std::printf(
      "rank %d detected the death of rank %d after %s (bound %s, asserted with %s "
      "for scheduling)\n",
      survivor, victim, absl::FormatDuration(latency).c_str(),
      absl::FormatDuration(kDetectionBound).c_str(),
      absl::FormatDuration(kSchedulingSlack).c_str());
  EXPECT_GE(latency, absl::ZeroDuration());
  EXPECT_LE(latency, kDetectionBound + kSchedulingSlack);
  const int status = job.Wait(survivor);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "rank " << survivor << " wait status " << status;
}

INSTANTIATE_TEST_SUITE_P(
    Ucx, PidNamespaceTest,
    ::testing::Values(
        // As two containers: rank 1 has its own PID namespace and /proc.
        Case{"tcp_kill_namespaced", "tcp", true, true},
        Case{"tcp_kill_host", "tcp", true, false},
        // UCX's choice of transports (shared memory among them).
        Case{"default_tls_kill_namespaced", "", true, true},
        Case{"default_tls_kill_host", "", true, false},
        // Its own PID namespace but the parent's /proc, where its pid 1 is
        // the host's init.
        Case{"parent_proc_kill_namespaced", "", false, true},
        Case{"parent_proc_kill_host", "", false, false}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// Shared memory alone cannot reach a rank in another PID namespace: UCX 1.13
// has no peer failure detection there (and cannot connect its mm endpoints
// without the peer's /proc entry). Connect says so, rather than a silent
// hang or a false death later.
TEST(PidNamespaceShmTest, SharedMemoryOnlyIsRefusedWithAHint) {
  if (absl::Status unshare = CheckUnshare(true); !unshare.ok()) {
    GTEST_SKIP() << unshare.message();
  }
  Job job;
  ASSERT_TRUE(job.Start("shm", true, /*victim=*/-1).ok());
  for (int r = 0; r < 2; ++r) {
    absl::StatusOr<std::string> ready =
        job.Receive(r, absl::Now() + kTimeout, "connection");
    ASSERT_FALSE(ready.ok()) << "rank " << r << " connected over shm alone";
    EXPECT_TRUE(absl::StrContains(ready.status().message(), "UNAVAILABLE"))
        << ready.status();
    EXPECT_TRUE(absl::StrContains(ready.status().message(), "PID namespace"))
        << ready.status();
  }
}

}  // namespace
}  // namespace rdmaflow::rdma::ucx

int main(int argc, char** argv) {
  if (const char* rank = std::getenv(rdmaflow::rdma::ucx::kRankEnv)) {
    int r = -1;
    if (!absl::SimpleAtoi(rank, &r) || (r != 0 && r != 1)) return 2;
    return rdmaflow::rdma::ucx::RankMain(r);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
