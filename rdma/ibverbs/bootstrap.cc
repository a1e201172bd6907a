// File: bootstrap.cc
// Wire format: every message is a 4-byte little-endian length and a body.
//   request (client):      an encoded QueuePairInfo, an 8-byte nonce, and
//                          16 bytes of RequestMac(token, over the info, the
//                          nonce and the target listener's rank and
//                          instance); the token itself never travels
//   answer (listener):     'K' + an encoded QueuePairInfo + 16 bytes of
//                          AnswerMac(token, over the info and the request's
//                          nonce), 'E' + why it was refused, or 'B' + why it
//                          is busy (retry with a new nonce)
//   confirmation (client): "C", once its queue pair is connected
// After the confirmation the connection stays open and silent until one side
// goes away.
#include "rdma/ibverbs/bootstrap.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rdma/ibverbs/wire.h"
#include "rdma/job_token.h"

namespace rdmaflow::rdma::ibverbs {
namespace {

// "RFI4": MAC'd with a nonce, bound to the target listener.
constexpr uint32_t kMagic = 0x52464934;
constexpr size_t kInfoBytes = 4 + 4 + 4 + 4 + 2 + 16 + 1 + 8 + 4 + 8 + 4 + 4;
constexpr size_t kRequestBytes = kInfoBytes + 8 + kHandshakeMacBytes;
constexpr size_t kAnswerBytes = kInfoBytes + kHandshakeMacBytes;
constexpr uint32_t kMaxMessage = 4096;
constexpr char kRequestLabel[] = "rdmaflow-tcp-request";
constexpr char kAnswerLabel[] = "rdmaflow-tcp-answer";
// How long a refused connection may take to read its answer and close.
constexpr absl::Duration kClosingGrace = absl::Seconds(2);
// Back-off between attempts while the listener answers "busy".
constexpr absl::Duration kFirstBackoff = absl::Milliseconds(5);
constexpr absl::Duration kMaxBackoff = absl::Milliseconds(200);

using wire::Get;
using wire::Put;

std::string Frame(absl::string_view body) {
  std::string frame;
  Put<uint32_t>(frame, body.size());
  frame.append(body.data(), body.size());
  return frame;
}

// Waits until `fd` is ready for `events` or the deadline passes.
bool WaitFor(int fd, short events, absl::Time deadline) {
  while (true) {
    int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return false;
    pollfd p{fd, events, 0};
    int rc = poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, INT_MAX)));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
  }
}

bool SendAll(int fd, absl::string_view body, absl::Time deadline) {
  const std::string frame = Frame(body);
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

void SetNonBlocking(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

std::string AddressText(const sockaddr_in& addr) {
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &addr.sin_addr, text, sizeof(text));
  return text;
}

bool IsLoopback(absl::string_view ipv4) {
  in_addr addr{};
  return inet_pton(AF_INET, std::string(ipv4).c_str(), &addr) == 1 &&
         (ntohl(addr.s_addr) >> 24) == 127;
}

// "localhost" or a loopback literal: a job that means to stay on this host.
bool NamesLoopback(absl::string_view host) {
  return absl::EqualsIgnoreCase(host, "localhost") || IsLoopback(host);
}

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

}  // namespace

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
  Put<uint64_t>(out, info.notify_address);
  Put<uint32_t>(out, info.notify_rkey);
  Put<uint32_t>(out, info.notify_slots);
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
  info.notify_address = Get<uint64_t>(in);
  info.notify_rkey = Get<uint32_t>(in);
  info.notify_slots = Get<uint32_t>(in);
  return info;
}

absl::StatusOr<std::string> EncodeHandshakeRequest(
    const QueuePairInfo& info, uint64_t nonce, const HandshakeTarget& target,
    absl::string_view job_token) {
  std::string out = EncodeQueuePairInfo(info);
  ASSIGN_OR_RETURN(const std::string mac,
                   RequestMac(job_token, kRequestLabel, out, nonce, target));
  Put<uint64_t>(out, nonce);
  out += mac;
  return out;
}

absl::StatusOr<HandshakeRequest> DecodeHandshakeRequest(
    absl::string_view bytes, absl::string_view job_token,
    const HandshakeTarget& target) {
  if (bytes.size() != kRequestBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a handshake request of ", bytes.size(), " bytes, expected ",
        kRequestBytes));
  }
  HandshakeRequest request;
  const absl::string_view fields = bytes.substr(0, kInfoBytes);
  ASSIGN_OR_RETURN(request.info, DecodeQueuePairInfo(fields));
  const char* in = bytes.data() + kInfoBytes;
  request.nonce = Get<uint64_t>(in);
  ASSIGN_OR_RETURN(const std::string expected,
                   RequestMac(job_token, kRequestLabel, fields, request.nonce,
                              target));
  RETURN_IF_ERROR(
      CheckMac(expected, bytes.substr(kInfoBytes + 8, kHandshakeMacBytes)));
  return request;
}

absl::StatusOr<std::string> EncodeHandshakeAnswer(const QueuePairInfo& info,
                                                  uint64_t request_nonce,
                                                  absl::string_view job_token) {
  std::string out = EncodeQueuePairInfo(info);
  ASSIGN_OR_RETURN(const std::string mac,
                   AnswerMac(job_token, kAnswerLabel, out, request_nonce));
  out += mac;
  return out;
}

absl::StatusOr<QueuePairInfo> DecodeHandshakeAnswer(
    absl::string_view bytes, uint64_t request_nonce,
    absl::string_view job_token) {
  if (bytes.size() != kAnswerBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a handshake answer of ", bytes.size(), " bytes, expected ",
        kAnswerBytes));
  }
  const absl::string_view fields = bytes.substr(0, kInfoBytes);
  ASSIGN_OR_RETURN(QueuePairInfo info, DecodeQueuePairInfo(fields));
  ASSIGN_OR_RETURN(const std::string expected,
                   AnswerMac(job_token, kAnswerLabel, fields, request_nonce));
  RETURN_IF_ERROR(CheckMac(expected, bytes.substr(kInfoBytes)));
  return info;
}

// ---------------------------------------------------------------------------
// Listener

struct BootstrapListener::Connection {
  enum class Phase {
    kRequest,      // Reading the request.
    kConfirm,      // Answered; awaiting "C". Holds `accepted`.
    kEstablished,  // Confirmed; open until the peer goes away.
    kClosing,      // Refused: sending the answer, then closing.
  };
  UniqueFd fd;
  std::string peer;     // The remote address, "ip:port".
  std::string peer_ip;  // Its IP alone.
  Phase phase = Phase::kRequest;
  absl::Time deadline;
  std::string in;   // Received, not yet a whole message.
  std::string out;  // To send.
  bool shut = false;  // shutdown(SHUT_WR) done.
  bool done = false;  // To be closed and removed.
  bool claimed = false;  // A request was decoded: claimed_rank is set.
  int32_t claimed_rank = -1;
  bool admitted = false;  // Counted by the listener's PeerAdmission.
  std::unique_ptr<AcceptedPeer> accepted;

  std::string Who() const {
    if (!claimed) return peer;
    return absl::StrCat(peer, " (claiming rank ", claimed_rank, ")");
  }
};

absl::StatusOr<std::unique_ptr<BootstrapListener>> BootstrapListener::Start(
    const BootstrapListenerOptions& options, Handler handler) {
  if (options.max_handshakes < 1 ||
      options.handshake_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "handshake listener options out of range: max_handshakes >= 1, "
        "handshake_timeout > 0");
  }
  ASSIGN_OR_RETURN(PeerAdmission admission, PeerAdmission::Create(AdmissionOptionsOf(options)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;  // Ephemeral.
  if (inet_pton(AF_INET, options.bind_address.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the handshake listener's bind address '", options.bind_address,
        "' is not an IPv4 address"));
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("socket() for the ibverbs handshake: ", strerror(errno)));
  }
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 128) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    int err = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat(
        "cannot listen for ibverbs handshakes on ", options.bind_address,
        ": ", strerror(err),
        "; is it an address of this host? Set RDMAFLOW_BIND_ADDR (or the "
        "ibverbs parameter bind_address=) to this host's address or "
        "interface on the job's network"));
  }
  int wake[2];
  if (pipe2(wake, O_CLOEXEC) != 0) {
    close(fd);
    return absl::InternalError("pipe() for the ibverbs handshake listener");
  }
  SetNonBlocking(fd);
  return std::unique_ptr<BootstrapListener>(new BootstrapListener(
      options, std::move(admission), fd, wake[0], wake[1], AddressText(addr),
      ntohs(addr.sin_port), std::move(handler)));
}

BootstrapListener::BootstrapListener(const BootstrapListenerOptions& options,
                                     PeerAdmission admission, int fd,
                                     int wake_read, int wake_write,
                                     std::string bound_address, int port,
                                     Handler handler)
    : options_(options),
      fd_(fd),
      wake_read_(wake_read),
      wake_write_(wake_write),
      bound_address_(std::move(bound_address)),
      port_(port),
      handler_(std::move(handler)),
      admission_(std::move(admission)) {
  thread_ = std::thread([this] { Serve(); });
}

BootstrapListener::~BootstrapListener() {
  char byte = 0;
  if (write(wake_write_, &byte, 1) != 1) {
    std::fprintf(stderr, "rdmaflow ibverbs: cannot wake the listener\n");
  }
  thread_.join();
  // Serve() released every connection before it returned.
  close(fd_);
  close(wake_read_);
  close(wake_write_);
}

BootstrapListenerStats BootstrapListener::stats() const {
  absl::MutexLock lock(&mutex_);
  return published_;
}

bool BootstrapListener::WaitForStats(
    const std::function<bool(const BootstrapListenerStats&)>& predicate,
    absl::Duration timeout) const {
  absl::MutexLock lock(&mutex_);
  auto holds = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return predicate(published_);
  };
  return mutex_.AwaitWithTimeout(absl::Condition(&holds), timeout);
}

void BootstrapListener::PublishStats() {
  counters_.handshakes = 0;
  counters_.pending_queue_pairs = 0;
  counters_.established = 0;
  for (const auto& c : connections_) {
    if (c->done) continue;
    if (c->phase == Connection::Phase::kEstablished) {
      ++counters_.established;
    } else {
      ++counters_.handshakes;
    }
    if (c->phase == Connection::Phase::kConfirm) {
      ++counters_.pending_queue_pairs;
    }
  }
  absl::MutexLock lock(&mutex_);
  published_ = counters_;
}

void BootstrapListener::Release(Connection& c) {
  if (c.admitted) {
    // Frees the claimed rank's slot: a restarted peer may connect again.
    admission_.Release(c.claimed_rank,
                       c.phase == Connection::Phase::kEstablished);
    c.admitted = false;
  }
  if (c.accepted == nullptr) return;
  c.accepted.reset();
  ++counters_.peers_released;
}

void BootstrapListener::Flush(Connection& c) {
  while (!c.out.empty()) {
    ssize_t n = send(c.fd.get(), c.out.data(), c.out.size(),
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      c.done = true;
      return;
    }
    c.out.erase(0, n);
  }
  if (c.phase == Connection::Phase::kClosing && !c.shut) {
    // Half-close: the client reads the answer, then EOF. Closing at once
    // could reset the connection (if unread bytes remain here) and lose the
    // answer.
    shutdown(c.fd.get(), SHUT_WR);
    c.shut = true;
  }
}

void BootstrapListener::Refuse(Connection& c, char code,
                               const std::string& why, bool log) {
  if (log) {
    std::fprintf(stderr,
                 "rdmaflow ibverbs: rank %d refused a handshake from %s: %s\n",
                 options_.local_rank, c.Who().c_str(), why.c_str());
  }
  if (code == 'B') {
    ++counters_.busy;
  } else {
    ++counters_.refused;
  }
  Release(c);
  c.phase = Connection::Phase::kClosing;
  c.deadline = std::min(c.deadline, absl::Now() + kClosingGrace);
  c.in.clear();
  c.out = Frame(std::string(1, code) + why);
  Flush(c);
}

void BootstrapListener::OnRequest(Connection& c, const std::string& body) {
  const HandshakeTarget self{options_.local_rank, options_.instance};
  absl::StatusOr<HandshakeRequest> request =
      DecodeHandshakeRequest(body, options_.job_token, self);
  if (request.status().code() == absl::StatusCode::kPermissionDenied) {
    // Nothing else is answered to a stranger, nor logged of what it claims.
    std::fprintf(stderr,
                 "rdmaflow ibverbs: rank %d refused a handshake from %s: %s "
                 "(this rank's token: %s)\n",
                 options_.local_rank, c.Who().c_str(),
                 std::string(request.status().message()).c_str(),
                 options_.job_token_source.c_str());
    Refuse(c, 'E',
           absl::StrCat(request.status().message(),
                        ": every rank of a job must have the same "
                        "RDMAFLOW_JOB_TOKEN (or the same TORCHELASTIC_RUN_ID, "
                        "MASTER_ADDR and MASTER_PORT), and the address must "
                        "be the target rank's current one"),
           /*log=*/false);
    return;
  }
  if (!request.ok()) {
    Refuse(c, 'E',
           absl::StrCat("malformed handshake request (",
                        request.status().message(),
                        "); do all ranks run the same rdmaflow version?"));
    return;
  }
  const int32_t rank = request->info.rank;
  c.claimed = true;
  c.claimed_rank = rank;
  const absl::Status admitted = admission_.Admit(
      Claim{rank, request->nonce, ClaimerOf(c.peer_ip, request->info.marker_address,
                                  request->info.marker_rkey)});
  if (admitted.code() == absl::StatusCode::kUnavailable) {
    Refuse(c, 'B', std::string(admitted.message()), /*log=*/false);
    return;
  }
  if (!admitted.ok()) {
    Refuse(c, 'E', std::string(admitted.message()));
    return;
  }
  c.admitted = true;
  absl::StatusOr<Accepted> accepted = handler_(request->info);
  if (!accepted.ok()) {
    Refuse(c, 'E', std::string(accepted.status().message()));
    return;
  }
  absl::StatusOr<std::string> answer =
      EncodeHandshakeAnswer(accepted->info, request->nonce, options_.job_token);
  if (!answer.ok()) {
    Refuse(c, 'E', std::string(answer.status().message()));
    return;
  }
  c.accepted = std::move(accepted->peer);
  c.phase = Connection::Phase::kConfirm;
  c.out = Frame("K" + *answer);
  Flush(c);
}

void BootstrapListener::OnMessage(Connection& c, const std::string& body) {
  switch (c.phase) {
    case Connection::Phase::kRequest:
      OnRequest(c, body);
      return;
    case Connection::Phase::kConfirm:
      if (body == "C") {
        admission_.Established(c.claimed_rank);
        c.phase = Connection::Phase::kEstablished;
        c.deadline = absl::InfiniteFuture();
        return;
      }
      Refuse(c, 'E', "expected the handshake's confirmation");
      return;
    case Connection::Phase::kEstablished:
      std::fprintf(stderr,
                   "rdmaflow ibverbs: rank %d: %s sent a message after its "
                   "handshake; closing the connection and its queue pair\n",
                   options_.local_rank, c.Who().c_str());
      c.done = true;
      return;
    case Connection::Phase::kClosing:
      return;
  }
}

void BootstrapListener::OnReadable(Connection& c) {
  char buffer[4096];
  while (!c.done) {
    ssize_t n = recv(c.fd.get(), buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {  // EOF or error: the peer is gone.
      if (c.phase == Connection::Phase::kConfirm) {
        std::fprintf(stderr,
                     "rdmaflow ibverbs: rank %d: %s closed its connection "
                     "before confirming the handshake; freeing its queue "
                     "pair\n",
                     options_.local_rank, c.Who().c_str());
        ++counters_.abandoned;
      }
      c.done = true;
      return;
    }
    if (c.phase == Connection::Phase::kClosing) continue;  // Discarded.
    c.in.append(buffer, n);
    while (!c.done && c.phase != Connection::Phase::kClosing &&
           c.in.size() >= 4) {
      uint32_t size = 0;
      std::memcpy(&size, c.in.data(), 4);
      if (size > kMaxMessage) {
        Refuse(c, 'E', absl::StrCat("a message of ", size, " bytes"));
        break;
      }
      if (c.in.size() < 4 + size) break;
      const std::string body = c.in.substr(4, size);
      c.in.erase(0, 4 + size);
      OnMessage(c, body);
    }
  }
}

void BootstrapListener::Serve() {
  std::vector<pollfd> fds;
  // After an accept() failure such as EMFILE the listening socket stays
  // readable: pause accepting instead of spinning on it.
  absl::Time accept_resume = absl::InfinitePast();
  while (true) {
    const absl::Time now = absl::Now();
    for (auto& c : connections_) {
      if (c->done || now < c->deadline) continue;
      if (c->phase == Connection::Phase::kRequest ||
          c->phase == Connection::Phase::kConfirm) {
        std::fprintf(stderr,
                     "rdmaflow ibverbs: rank %d: the handshake with %s did "
                     "not finish within %s; closing it%s\n",
                     options_.local_rank, c->Who().c_str(),
                     absl::FormatDuration(options_.handshake_timeout).c_str(),
                     c->accepted != nullptr ? " and freeing its queue pair"
                                            : "");
        ++counters_.abandoned;
      }
      c->done = true;
    }
    for (auto& c : connections_) {
      if (c->done) Release(*c);
    }
    connections_.erase(
        std::remove_if(connections_.begin(), connections_.end(),
                       [](const auto& c) { return c->done; }),
        connections_.end());
    PublishStats();

    const bool accepting = counters_.handshakes < options_.max_handshakes &&
                           now >= accept_resume;
    fds.clear();
    fds.push_back({wake_read_, POLLIN, 0});
    // A negative descriptor is ignored by poll(): at the cap, new clients
    // wait in the backlog.
    fds.push_back({accepting ? fd_ : -1, POLLIN, 0});
    absl::Time next =
        now < accept_resume ? accept_resume : absl::InfiniteFuture();
    for (const auto& c : connections_) {
      short events = POLLIN;
      if (!c->out.empty()) events |= POLLOUT;
      fds.push_back({c->fd.get(), events, 0});
      next = std::min(next, c->deadline);
    }
    int timeout_ms = -1;
    if (next != absl::InfiniteFuture()) {
      timeout_ms = static_cast<int>(std::clamp<int64_t>(
          absl::ToInt64Milliseconds(absl::Ceil(next - now,
                                               absl::Milliseconds(1))),
          0, INT_MAX));
    }
    if (poll(fds.data(), fds.size(), timeout_ms) < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "rdmaflow ibverbs: the handshake listener stops: "
                   "poll: %s\n", strerror(errno));
      break;
    }
    if (fds[0].revents != 0) break;
    const size_t existing = connections_.size();
    for (size_t i = 0; i < existing; ++i) {
      const short revents = fds[i + 2].revents;
      Connection& c = *connections_[i];
      if (revents == 0 || c.done) continue;
      if (revents & POLLOUT) Flush(c);
      if (revents & (POLLIN | POLLHUP | POLLERR)) OnReadable(c);
      if (revents & POLLNVAL) c.done = true;
    }
    if (fds[1].revents & POLLIN) {
      int handshakes = counters_.handshakes;
      while (handshakes < options_.max_handshakes) {
        sockaddr_in from{};
        socklen_t len = sizeof(from);
        int fd = accept4(fd_, reinterpret_cast<sockaddr*>(&from), &len,
                         SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
          if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
              errno == ENOMEM) {
            std::fprintf(stderr,
                         "rdmaflow ibverbs: rank %d: accept() for a "
                         "handshake: %s; pausing 100 ms\n",
                         options_.local_rank, strerror(errno));
            accept_resume = absl::Now() + absl::Milliseconds(100);
          }
          break;  // EAGAIN, or an error of that one connection.
        }
        auto c = std::make_unique<Connection>();
        c->fd = UniqueFd(fd);
        c->peer_ip = AddressText(from);
        c->peer = absl::StrCat(c->peer_ip, ":", ntohs(from.sin_port));
        c->deadline = absl::Now() + options_.handshake_timeout;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        connections_.push_back(std::move(c));
        ++handshakes;
      }
    }
  }
  // Stopping: release every accepted peer on this thread.
  for (auto& c : connections_) Release(*c);
  connections_.clear();
  PublishStats();
}

// ---------------------------------------------------------------------------
// Client

namespace {

// One attempt: the peer's answer ('K', 'E' or 'B' + body) and the connection.
struct Attempt {
  char code = 0;
  std::string body;
  UniqueFd connection;
};

absl::StatusOr<Attempt> TryHandshake(const sockaddr_in& to,
                                     const std::string& where,
                                     const std::string& request,
                                     absl::Time deadline) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) return absl::InternalError("socket() for the handshake");
  auto fail = [&](absl::string_view why) {
    return absl::UnavailableError(absl::StrCat(
        "ibverbs handshake with ", where, " failed: ", why,
        "; is the peer's transport alive, and the address reachable?"));
  };
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&to), sizeof(to)) !=
          0 &&
      errno != EINPROGRESS) {
    return fail(strerror(errno));
  }
  if (!WaitFor(fd.get(), POLLOUT, deadline)) return fail("connect timed out");
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) return fail(strerror(err));
  int one = 1;
  setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::string reply;
  if (!SendAll(fd.get(), request, deadline) ||
      !ReceiveMessage(fd.get(), &reply, deadline) || reply.empty()) {
    return fail("no answer");
  }
  Attempt attempt;
  attempt.code = reply[0];
  attempt.body = reply.substr(1);
  attempt.connection = std::move(fd);
  return attempt;
}

}  // namespace

absl::StatusOr<Handshake> ExchangeQueuePairInfo(
    const std::string& host, int port, const QueuePairInfo& info,
    const HandshakeTarget& target, absl::string_view job_token,
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
        "cannot resolve rank ", target.rank, "'s handshake at ", where, ": ",
        gai_strerror(rc)));
  }
  sockaddr_in to{};
  std::memcpy(&to, found->ai_addr, sizeof(to));
  freeaddrinfo(found);
  const absl::Time start = absl::Now();
  absl::Duration backoff = kFirstBackoff;
  for (int attempts = 1;; ++attempts) {
    // A fresh nonce per attempt: the listener refuses one it has seen.
    ASSIGN_OR_RETURN(const uint64_t nonce, RandomNonce());
    ASSIGN_OR_RETURN(const std::string message,
                     EncodeHandshakeRequest(info, nonce, target, job_token));
    ASSIGN_OR_RETURN(Attempt attempt,
                     TryHandshake(to, where, message, deadline));
    if (attempt.code == 'K') {
      Handshake handshake;
      absl::StatusOr<QueuePairInfo> remote =
          DecodeHandshakeAnswer(attempt.body, nonce, job_token);
      if (!remote.ok()) {
        return absl::Status(remote.status().code(),
                            absl::StrCat("the handshake answer from ", where,
                                         ": ", remote.status().message()));
      }
      handshake.remote = *remote;
      handshake.connection = std::move(attempt.connection);
      return handshake;
    }
    if (attempt.code != 'B') {
      return absl::UnavailableError(absl::StrCat(
          "the peer at ", where, " refused the connection: ", attempt.body));
    }
    if (absl::Now() + backoff >= deadline) {
      return absl::UnavailableError(absl::StrCat(
          "the peer at ", where, " stayed busy (", attempts, " attempts in ",
          absl::FormatDuration(absl::Trunc(absl::Now() - start,
                                           absl::Milliseconds(1))),
          "): ", attempt.body));
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

absl::Status ConfirmHandshake(const Handshake& handshake,
                              absl::Duration timeout) {
  if (!SendAll(handshake.connection.get(), "C", absl::Now() + timeout)) {
    return absl::UnavailableError(absl::StrCat(
        "rank ", handshake.remote.rank,
        " closed the handshake connection before it was confirmed (its "
        "listener gave up, or the process is gone)"));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Binding

absl::StatusOr<std::string> ResolveIpv4(absl::string_view name) {
  const std::string text(name);
  in_addr literal{};
  if (inet_pton(AF_INET, text.c_str(), &literal) == 1) return text;
  ifaddrs* interfaces = nullptr;
  if (getifaddrs(&interfaces) == 0) {
    std::string found;
    for (ifaddrs* i = interfaces; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr != nullptr && i->ifa_addr->sa_family == AF_INET &&
          text == i->ifa_name) {
        found = AddressText(*reinterpret_cast<sockaddr_in*>(i->ifa_addr));
        break;
      }
    }
    freeifaddrs(interfaces);
    if (!found.empty()) return found;
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* resolved = nullptr;
  if (int rc = getaddrinfo(text.c_str(), nullptr, &hints, &resolved);
      rc != 0 || resolved == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text,
        "' is neither an IPv4 address, nor an interface with one, nor a host "
        "name that resolves (",
        rc != 0 ? gai_strerror(rc) : "no address", ")"));
  }
  std::string address =
      AddressText(*reinterpret_cast<sockaddr_in*>(resolved->ai_addr));
  freeaddrinfo(resolved);
  return address;
}

absl::StatusOr<std::string> LocalAddressTowards(absl::string_view host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const std::string text(host);
  if (int rc = getaddrinfo(text.c_str(), "9", &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve '", text, "': ", gai_strerror(rc)));
  }
  UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  // connect() on a UDP socket only picks the route and source address.
  const int rc = fd.get() < 0
                     ? -1
                     : connect(fd.get(), found->ai_addr, found->ai_addrlen);
  const int err = errno;
  freeaddrinfo(found);
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  if (rc != 0 ||
      getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "no route from this host to '", text, "': ", strerror(err)));
  }
  return AddressText(local);
}

absl::StatusOr<BindChoice> ChooseBindAddress(absl::string_view configured,
                                             absl::string_view fallback) {
  auto resolve = [](absl::string_view name,
                    absl::string_view what) -> absl::StatusOr<std::string> {
    absl::StatusOr<std::string> address = ResolveIpv4(name);
    if (!address.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": ", address.status().message()));
    }
    return address;
  };
  if (!configured.empty()) {
    ASSIGN_OR_RETURN(std::string address,
                     resolve(configured, "the ibverbs bind_address"));
    return BindChoice{address, absl::StrCat("configured (", configured, ")")};
  }
  if (const std::string named = Env("RDMAFLOW_BIND_ADDR"); !named.empty()) {
    ASSIGN_OR_RETURN(std::string address, resolve(named, "RDMAFLOW_BIND_ADDR"));
    return BindChoice{address, absl::StrCat("RDMAFLOW_BIND_ADDR=", named)};
  }
  const std::string fallback_text =
      fallback.empty() ? "127.0.0.1" : std::string(fallback);
  if (const std::string master = Env("MASTER_ADDR"); !master.empty()) {
    absl::StatusOr<std::string> local = LocalAddressTowards(master);
    if (!local.ok()) {
      return absl::Status(
          local.status().code(),
          absl::StrCat("cannot choose the handshake address from MASTER_ADDR=",
                       master, ": ", local.status().message(),
                       "; set RDMAFLOW_BIND_ADDR to this host's address or "
                       "interface on the job's network"));
    }
    if (IsLoopback(*local) && !NamesLoopback(master)) {
      absl::StatusOr<std::string> other = ResolveIpv4(fallback_text);
      if (other.ok() && !IsLoopback(*other)) {
        return BindChoice{
            *other, absl::StrCat("MASTER_ADDR=", master,
                                 " is this host but resolves to loopback "
                                 "here; using the device's address")};
      }
    }
    return BindChoice{*local, absl::StrCat("the interface that reaches "
                                           "MASTER_ADDR=",
                                           master)};
  }
  ASSIGN_OR_RETURN(std::string address,
                   resolve(fallback_text, "the default handshake address"));
  return BindChoice{address, "the default address (no MASTER_ADDR)"};
}

}  // namespace rdmaflow::rdma::ibverbs
