// File: peer_process.cc
#include "collectives/peer_process.h"

#include <pthread.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace rdmaflow::collectives {
namespace {

// The kernel caps one call at about 2 GiB (MAX_RW_COUNT) and reads the
// rest as a partial transfer: a read goes in pieces of at most this.
constexpr size_t kMaxPiece = size_t{1} << 30;

// A pthread mutex, held across fork() by the forking thread (pthread_atfork),
// so a child never inherits it locked by a thread it does not have.
struct OwnToken {
  pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
  ProcessToken token;
  // What the token's address points at: lives as long as the process.
  uint64_t bytes[2] = {0, 0};
};

OwnToken& Own() {
  static OwnToken* own = [] {
    auto* made = new OwnToken;
    pthread_atfork([] { pthread_mutex_lock(&Own().mutex); },
                   [] { pthread_mutex_unlock(&Own().mutex); },
                   [] { pthread_mutex_unlock(&Own().mutex); });
    return made;
  }();
  return *own;
}

std::string ErrnoText(int error) {
  return absl::StrCat(std::strerror(error), " (errno ", error, ")");
}

}  // namespace

ProcessToken OwnProcessToken() {
  OwnToken& own = Own();
  pthread_mutex_lock(&own.mutex);
  const int64_t pid = getpid();
  if (own.token.pid != pid) {  // the first call, or a child after fork()
    absl::BitGen random;
    own.bytes[0] = absl::Uniform<uint64_t>(random);
    own.bytes[1] = absl::Uniform<uint64_t>(random);
    own.token.pid = pid;
    own.token.address = reinterpret_cast<uintptr_t>(&own.bytes[0]);
    own.token.token[0] = own.bytes[0];
    own.token.token[1] = own.bytes[1];
  }
  const ProcessToken token = own.token;
  pthread_mutex_unlock(&own.mutex);
  return token;
}

std::string FormatProcessToken(const ProcessToken& token) {
  return absl::StrCat("pid=", token.pid, " at=", absl::Hex(token.address),
                      " token=", absl::Hex(token.token[0]), ".", absl::Hex(token.token[1]));
}

absl::StatusOr<ProcessToken> ParseProcessToken(absl::string_view text) {
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a process token (pid=<n> at=<hex> token=<hex>.<hex>): '",
        absl::CHexEscape(text.substr(0, 200)), "'"));
  };
  std::vector<absl::string_view> fields = absl::StrSplit(text, ' ');
  if (fields.size() != 3 || !absl::ConsumePrefix(&fields[0], "pid=") ||
      !absl::ConsumePrefix(&fields[1], "at=") || !absl::ConsumePrefix(&fields[2], "token=")) {
    return bad();
  }
  std::vector<absl::string_view> halves = absl::StrSplit(fields[2], '.');
  ProcessToken token;
  if (halves.size() != 2 || !absl::SimpleAtoi(fields[0], &token.pid) || token.pid <= 0 ||
      token.pid > INT32_MAX ||
      !absl::SimpleHexAtoi(fields[1], &token.address) || token.address == 0 ||
      !absl::SimpleHexAtoi(halves[0], &token.token[0]) ||
      !absl::SimpleHexAtoi(halves[1], &token.token[1])) {
    return bad();
  }
  return token;
}

absl::StatusOr<PeerProcess> PeerProcess::Open(const ProcessToken& peer, std::string name) {
  PeerProcess process(peer, std::move(name));
  uint64_t seen[2] = {0, 0};
  iovec local = {seen, sizeof(seen)};
  iovec remote = {reinterpret_cast<void*>(static_cast<uintptr_t>(peer.address)), sizeof(seen)};
  const ssize_t n =
      process_vm_readv(static_cast<pid_t>(peer.pid), &local, 1, &remote, 1, 0);
  std::string why;
  if (n < 0) {
    const int error = errno;
    why = absl::StrCat("process_vm_readv: ", ErrnoText(error));
    if (error == EPERM) {
      absl::StrAppend(&why, "; the kernel's ptrace policy forbids it (same user needed; with "
                            "kernel.yama.ptrace_scope >= 1 only a process's ancestors may: "
                            "set it to 0 or give the ranks CAP_SYS_PTRACE)");
    } else if (error == ESRCH) {
      absl::StrAppend(&why, "; no such process here (another PID namespace?)");
    } else if (error == ENOSYS) {
      absl::StrAppend(&why, "; this kernel or its seccomp filter has no cross-memory attach");
    } else if (error == EFAULT) {
      absl::StrAppend(&why, "; its token's address is not mapped in that process (another "
                            "process holds its pid, or another PID namespace?)");
    }
  } else if (n != static_cast<ssize_t>(sizeof(seen)) || seen[0] != peer.token[0] ||
             seen[1] != peer.token[1]) {
    why = "its pid names another process (the token differs: another PID namespace?)";
  }
  if (!why.empty()) {
    return absl::UnimplementedError(absl::StrCat(
        "cannot read ", process.name_, "'s memory (pid ", peer.pid, "): ", why));
  }
  return process;
}

absl::Status PeerProcess::Read(uint64_t remote, size_t bytes, std::byte* local) const {
  if (bytes == 0) return absl::OkStatus();
  auto where = [&] {
    return absl::StrCat("reading ", bytes, " bytes at 0x", absl::Hex(remote), " of ", name_,
                        "'s memory (pid ", peer_.pid, ") with process_vm_readv");
  };
  if (remote == 0 || remote > UINT64_MAX - bytes) {
    return absl::DataLossError(absl::StrCat(
        where(), ": the range is outside any address space (a forged or corrupted address)"));
  }
  for (size_t done = 0; done < bytes;) {
    const size_t piece = std::min(bytes - done, kMaxPiece);
    uint64_t seen[2] = {0, 0};
    iovec locals[2] = {{seen, sizeof(seen)}, {local + done, piece}};
    iovec remotes[2] = {
        {reinterpret_cast<void*>(static_cast<uintptr_t>(peer_.address)), sizeof(seen)},
        {reinterpret_cast<void*>(static_cast<uintptr_t>(remote + done)), piece}};
    const ssize_t n = process_vm_readv(static_cast<pid_t>(peer_.pid), locals, 2, remotes, 2, 0);
    if (n < 0) {
      // Not even the token: the process is gone, or its pid is another's.
      return absl::UnavailableError(absl::StrCat(
          where(), ": ", ErrnoText(errno), "; its process is gone (its pid names none, or "
          "another process)"));
    }
    if (seen[0] != peer_.token[0] || seen[1] != peer_.token[1]) {
      return absl::UnavailableError(absl::StrCat(
          where(), ": its process is gone (its pid names another process)"));
    }
    if (static_cast<size_t>(n) != sizeof(seen) + piece) {
      return absl::DataLossError(absl::StrCat(
          where(), ": only ", n - static_cast<ssize_t>(sizeof(seen)), " bytes of ", piece,
          " at 0x", absl::Hex(remote + done),
          " are mapped in its process (a forged or stale address)"));
    }
    done += piece;
  }
  return absl::OkStatus();
}

}  // namespace rdmaflow::collectives
