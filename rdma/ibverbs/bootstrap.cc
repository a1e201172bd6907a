// File: bootstrap.cc
// Wire format: every message is a 4-byte little-endian length and a body.
// Request body: an encoded QueuePairInfo. Answer body: 'K' + an encoded
// QueuePairInfo, or 'E' + an error message.
#include "rdma/ibverbs/bootstrap.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace rdmaflow::rdma::ibverbs {
namespace {

constexpr uint32_t kMagic = 0x52464931;  // "RFI1"
constexpr size_t kInfoBytes = 4 + 4 + 4 + 4 + 2 + 16 + 1 + 8 + 4;
constexpr uint32_t kMaxMessage = 4096;
constexpr absl::Duration kServerTimeout = absl::Seconds(10);

template <typename T>
void Put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}
template <typename T>
T Get(const char*& in) {
  T value;
  std::memcpy(&value, in, sizeof(value));
  in += sizeof(value);
  return value;
}

// Waits until `fd` is ready for `events` or the deadline passes.
bool WaitFor(int fd, short events, absl::Time deadline) {
  while (true) {
    int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return false;
    pollfd p{fd, events, 0};
    int rc = poll(&p, 1, static_cast<int>(ms));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
  }
}

bool SendAll(int fd, const std::string& body, absl::Time deadline) {
  std::string frame;
  Put<uint32_t>(frame, body.size());
  frame += body;
  size_t sent = 0;
  while (sent < frame.size()) {
    if (!WaitFor(fd, POLLOUT, deadline)) return false;
    ssize_t n = send(fd, frame.data() + sent, frame.size() - sent,
                     MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return false;
    sent += n;
  }
  return true;
}

bool ReceiveExactly(int fd, char* out, size_t size, absl::Time deadline) {
  size_t got = 0;
  while (got < size) {
    if (!WaitFor(fd, POLLIN, deadline)) return false;
    ssize_t n = recv(fd, out + got, size - got, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return false;
    got += n;
  }
  return true;
}

bool ReceiveMessage(int fd, std::string* body, absl::Time deadline) {
  uint32_t size = 0;
  if (!ReceiveExactly(fd, reinterpret_cast<char*>(&size), 4, deadline) ||
      size > kMaxMessage) {
    return false;
  }
  body->resize(size);
  return ReceiveExactly(fd, body->data(), size, deadline);
}

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) close(fd_);
}

bool PeerClosed(int connection) {
  pollfd p{connection, POLLIN, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return true;
  char byte;
  ssize_t n = recv(connection, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
}

std::string EncodeQueuePairInfo(const QueuePairInfo& info) {
  std::string out;
  Put<uint32_t>(out, kMagic);
  Put<int32_t>(out, info.rank);
  Put<uint32_t>(out, info.qpn);
  Put<uint32_t>(out, info.psn);
  Put<uint16_t>(out, info.lid);
  out.append(reinterpret_cast<const char*>(info.gid.raw), 16);
  Put<uint8_t>(out, info.mtu);
  Put<uint64_t>(out, info.marker_address);
  Put<uint32_t>(out, info.marker_rkey);
  return out;
}

absl::StatusOr<QueuePairInfo> DecodeQueuePairInfo(absl::string_view bytes) {
  if (bytes.size() != kInfoBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "queue-pair info of ", bytes.size(), " bytes, expected ", kInfoBytes));
  }
  const char* in = bytes.data();
  if (Get<uint32_t>(in) != kMagic) {
    return absl::InvalidArgumentError(
        "queue-pair info of another version or protocol");
  }
  QueuePairInfo info;
  info.rank = Get<int32_t>(in);
  info.qpn = Get<uint32_t>(in);
  info.psn = Get<uint32_t>(in);
  info.lid = Get<uint16_t>(in);
  std::memcpy(info.gid.raw, in, 16);
  in += 16;
  info.mtu = Get<uint8_t>(in);
  info.marker_address = Get<uint64_t>(in);
  info.marker_rkey = Get<uint32_t>(in);
  return info;
}

absl::StatusOr<std::unique_ptr<BootstrapListener>> BootstrapListener::Start(
    Handler handler) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("socket() for the ibverbs handshake: ", strerror(errno)));
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 64) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    int err = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat(
        "cannot listen for ibverbs handshakes: ", strerror(err)));
  }
  int wake[2];
  if (pipe2(wake, O_CLOEXEC) != 0) {
    close(fd);
    return absl::InternalError("pipe() for the ibverbs handshake listener");
  }
  SetNonBlocking(fd);
  return std::unique_ptr<BootstrapListener>(new BootstrapListener(
      fd, wake[0], wake[1], ntohs(addr.sin_port), std::move(handler)));
}

BootstrapListener::BootstrapListener(int fd, int wake_read, int wake_write,
                                     int port, Handler handler)
    : fd_(fd),
      wake_read_(wake_read),
      wake_write_(wake_write),
      port_(port),
      handler_(std::move(handler)) {
  thread_ = std::thread([this] { Serve(); });
}

BootstrapListener::~BootstrapListener() {
  char byte = 0;
  if (write(wake_write_, &byte, 1) != 1) {
    std::fprintf(stderr, "rdmaflow ibverbs: cannot wake the listener\n");
  }
  thread_.join();
  close(fd_);
  close(wake_read_);
  close(wake_write_);
}

void BootstrapListener::Serve() {
  while (true) {
    pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_read_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    int connection = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0) continue;
    SetNonBlocking(connection);
    UniqueFd owned(connection);
    if (Answer(connection)) kept_.push_back(std::move(owned));
  }
}

bool BootstrapListener::Answer(int connection) {
  const absl::Time deadline = absl::Now() + kServerTimeout;
  std::string body;
  if (!ReceiveMessage(connection, &body, deadline)) return false;
  absl::StatusOr<QueuePairInfo> request = DecodeQueuePairInfo(body);
  absl::StatusOr<QueuePairInfo> answer =
      request.ok() ? handler_(*request) : request.status();
  std::string reply = answer.ok()
                          ? "K" + EncodeQueuePairInfo(*answer)
                          : "E" + std::string(answer.status().message());
  return SendAll(connection, reply, deadline) && answer.ok();
}

absl::StatusOr<Handshake> ExchangeQueuePairInfo(
    const std::string& host, int port, const QueuePairInfo& request,
    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const std::string where = absl::StrCat(host, ":", port);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), absl::StrCat(port).c_str(), &hints,
                           &found);
      rc != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot resolve rank ", request.rank, "'s peer at ", where, ": ",
        gai_strerror(rc)));
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int rc = fd < 0 ? -1 : connect(fd, found->ai_addr, found->ai_addrlen);
  freeaddrinfo(found);
  if (fd < 0) return absl::InternalError("socket() for the handshake");
  auto fail = [&](absl::string_view why) {
    close(fd);
    return absl::UnavailableError(absl::StrCat(
        "ibverbs handshake with ", where, " failed: ", why,
        "; is the peer's transport alive, and the address reachable?"));
  };
  if (rc != 0 && errno != EINPROGRESS) return fail(strerror(errno));
  if (!WaitFor(fd, POLLOUT, deadline)) return fail("connect timed out");
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) return fail(strerror(err));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::string reply;
  if (!SendAll(fd, EncodeQueuePairInfo(request), deadline) ||
      !ReceiveMessage(fd, &reply, deadline) || reply.empty()) {
    return fail("no answer");
  }
  Handshake handshake;
  handshake.connection = UniqueFd(fd);
  if (reply[0] != 'K') {
    return absl::UnavailableError(absl::StrCat(
        "the peer at ", where, " refused the connection: ", reply.substr(1)));
  }
  ASSIGN_OR_RETURN(handshake.remote,
                   DecodeQueuePairInfo(absl::string_view(reply).substr(1)));
  return handshake;
}

}  // namespace rdmaflow::rdma::ibverbs
