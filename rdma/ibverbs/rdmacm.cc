// File: rdmacm.cc
#include "rdma/ibverbs/rdmacm.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rdma/ibverbs/ibverbs_status.h"
#include "rdma/ibverbs/wire.h"
#include "rdma/job_token.h"

namespace rdmaflow::rdma::ibverbs {
namespace {

using wire::Get;
using wire::Put;

// Version 2: a nonce, the target in the request's MAC, the request's nonce
// in the answer's.
constexpr uint32_t kRequestMagic = 0x32434652;  // "RFC2"
constexpr uint32_t kAnswerMagic = 0x32414652;   // "RFA2"
constexpr char kRequestLabel[] = "rdmaflow-cm-request";
constexpr char kAnswerLabel[] = "rdmaflow-cm-answer";
// Magic, rank, marker region, credit word, nonce.
constexpr size_t kRequestFields = 4 + 4 + 8 + 4 + 8 + 4 + 8;
// Magic, rank, marker region, ring.
constexpr size_t kAnswerFields = 4 + 4 + 8 + 4 + 8 + 4 + 4;
// What a connect request's private data can carry on RC (IB CM REQ: 92
// bytes less the connection manager's 36-byte header).
static_assert(kRequestFields + kHandshakeMacBytes == 56);
constexpr int kBacklog = 64;
// A refusal the client retries (the pending cap), as the TCP 'B' answer.
constexpr char kBusyPrefix[] = "busy: ";
constexpr absl::Duration kFirstBackoff = absl::Milliseconds(5);
constexpr absl::Duration kMaxBackoff = absl::Milliseconds(200);

absl::Status CmError(int err, absl::string_view what) {
  return VerbsError(err, what);
}

// Waits for the next event of `channel` (non-blocking fd) until `deadline`;
// nullptr on timeout. The caller acknowledges it.
rdma_cm_event* NextEvent(rdma_event_channel* channel, absl::Time deadline) {
  while (true) {
    rdma_cm_event* event = nullptr;
    if (rdma_get_cm_event(channel, &event) == 0) return event;
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return nullptr;
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return nullptr;
    pollfd p{channel->fd, POLLIN, 0};
    poll(&p, 1, static_cast<int>(std::min<int64_t>(
                    absl::ToInt64Milliseconds(left) + 1, 1000)));
  }
}

absl::Status NonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return CmError(errno, "making an rdmacm event channel non-blocking");
  }
  return absl::OkStatus();
}

// A new event channel whose fd never blocks (events are read after poll()).
absl::StatusOr<rdma_event_channel*> NewEventChannel() {
  rdma_event_channel* channel = rdma_create_event_channel();
  if (channel == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "rdma_create_event_channel failed: ", std::strerror(errno),
        "; is the rdma_ucm module loaded (/dev/infiniband/rdma_cm)?"));
  }
  if (absl::Status s = NonBlocking(channel->fd); !s.ok()) {
    rdma_destroy_event_channel(channel);
    return s;
  }
  return channel;
}

absl::StatusOr<sockaddr_in> Ipv4(const std::string& host, int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rdmacm needs an IPv4 address, not '", host, "'"));
  }
  return address;
}

}  // namespace

absl::StatusOr<std::string> EncodeCmRequest(const CmPeerInfo& info,
                                            uint64_t nonce,
                                            const HandshakeTarget& target,
                                            absl::string_view job_token) {
  std::string out;
  Put<uint32_t>(out, kRequestMagic);
  Put<int32_t>(out, info.rank);
  Put<uint64_t>(out, info.marker_address);
  Put<uint32_t>(out, info.marker_rkey);
  Put<uint64_t>(out, info.notify_address);
  Put<uint32_t>(out, info.notify_rkey);
  Put<uint64_t>(out, nonce);
  ASSIGN_OR_RETURN(const std::string mac,
                   RequestMac(job_token, kRequestLabel, out, nonce, target));
  out += mac;
  return out;
}

absl::StatusOr<CmRequest> DecodeCmRequest(absl::string_view bytes,
                                          absl::string_view job_token,
                                          const HandshakeTarget& target) {
  // The connection manager pads private data with zeros: longer is fine.
  if (bytes.size() < kRequestFields + kHandshakeMacBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rdmacm request of ", bytes.size(), " bytes, expected ",
        kRequestFields + kHandshakeMacBytes));
  }
  const char* in = bytes.data();
  if (Get<uint32_t>(in) != kRequestMagic) {
    return absl::InvalidArgumentError(
        "rdmacm request of another protocol or version");
  }
  CmRequest request;
  request.info.rank = Get<int32_t>(in);
  request.info.marker_address = Get<uint64_t>(in);
  request.info.marker_rkey = Get<uint32_t>(in);
  request.info.notify_address = Get<uint64_t>(in);
  request.info.notify_rkey = Get<uint32_t>(in);
  request.nonce = Get<uint64_t>(in);
  ASSIGN_OR_RETURN(const std::string expected,
                   RequestMac(job_token, kRequestLabel,
                              bytes.substr(0, kRequestFields), request.nonce,
                              target));
  RETURN_IF_ERROR(CheckMac(
      expected, bytes.substr(kRequestFields, kHandshakeMacBytes)));
  return request;
}

absl::StatusOr<std::string> EncodeCmAnswer(const CmPeerInfo& info,
                                           uint64_t request_nonce,
                                           absl::string_view job_token) {
  std::string out;
  Put<uint32_t>(out, kAnswerMagic);
  Put<int32_t>(out, info.rank);
  Put<uint64_t>(out, info.marker_address);
  Put<uint32_t>(out, info.marker_rkey);
  Put<uint64_t>(out, info.notify_address);
  Put<uint32_t>(out, info.notify_rkey);
  Put<uint32_t>(out, info.notify_slots);
  ASSIGN_OR_RETURN(const std::string mac,
                   AnswerMac(job_token, kAnswerLabel, out, request_nonce));
  out += mac;
  return out;
}

absl::StatusOr<CmPeerInfo> DecodeCmAnswer(absl::string_view bytes,
                                          uint64_t request_nonce,
                                          absl::string_view job_token) {
  if (bytes.size() < kAnswerFields + kHandshakeMacBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rdmacm answer of ", bytes.size(), " bytes, expected ",
        kAnswerFields + kHandshakeMacBytes));
  }
  const char* in = bytes.data();
  if (Get<uint32_t>(in) != kAnswerMagic) {
    return absl::InvalidArgumentError(
        "rdmacm answer of another protocol or version");
  }
  ASSIGN_OR_RETURN(const std::string expected,
                   AnswerMac(job_token, kAnswerLabel,
                             bytes.substr(0, kAnswerFields), request_nonce));
  RETURN_IF_ERROR(
      CheckMac(expected, bytes.substr(kAnswerFields, kHandshakeMacBytes)));
  CmPeerInfo info;
  info.rank = Get<int32_t>(in);
  info.marker_address = Get<uint64_t>(in);
  info.marker_rkey = Get<uint32_t>(in);
  info.notify_address = Get<uint64_t>(in);
  info.notify_rkey = Get<uint32_t>(in);
  info.notify_slots = Get<uint32_t>(in);
  return info;
}

absl::Status ConnectQueuePairWithCm(rdma_cm_id* id, ibv_qp* qp,
                                    uint8_t ack_timeout, uint8_t retry_count) {
  for (ibv_qp_state state : {IBV_QPS_RTR, IBV_QPS_RTS}) {
    ibv_qp_attr attr{};
    int mask = 0;
    attr.qp_state = state;
    if (int rc = rdma_init_qp_attr(id, &attr, &mask); rc != 0) {
      return CmError(errno, "rdma_init_qp_attr");
    }
    if (state == IBV_QPS_RTS) {
      attr.timeout = ack_timeout;
      attr.retry_cnt = retry_count;
      attr.rnr_retry = 7;  // Retry receiver-not-ready forever.
      mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY;
    }
    if (int rc = ibv_modify_qp(qp, &attr, mask); rc != 0) {
      return CmError(rc, state == IBV_QPS_RTR ? "ibv_modify_qp to RTR (rdmacm)"
                                              : "ibv_modify_qp to RTS (rdmacm)");
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Listener

absl::StatusOr<std::unique_ptr<CmListener>> CmListener::Start(
    const CmListenerOptions& options, Handler handler) {
  ASSIGN_OR_RETURN(PeerAdmission admission, PeerAdmission::Create(AdmissionOptionsOf(options)));
  ASSIGN_OR_RETURN(sockaddr_in address, Ipv4(options.bind_address, 0));
  ASSIGN_OR_RETURN(rdma_event_channel * channel, NewEventChannel());
  rdma_cm_id* id = nullptr;
  auto fail = [&](absl::Status status) {
    if (id != nullptr) rdma_destroy_id(id);
    rdma_destroy_event_channel(channel);
    return status;
  };
  if (rdma_create_id(channel, &id, nullptr, RDMA_PS_TCP) != 0) {
    return fail(CmError(errno, "rdma_create_id"));
  }
  if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&address)) != 0) {
    return fail(absl::UnavailableError(absl::StrCat(
        "rdmacm cannot bind ", options.bind_address, ": ",
        std::strerror(errno),
        "; it must be the IPv4 address of an RDMA device's interface (set "
        "bind_address=)")));
  }
  if (rdma_listen(id, kBacklog) != 0) {
    return fail(CmError(errno, "rdma_listen"));
  }
  int wake[2];
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    return fail(CmError(errno, "pipe2"));
  }
  const int port = ntohs(rdma_get_src_port(id));
  return std::unique_ptr<CmListener>(
      new CmListener(options, std::move(admission), channel, id, wake[0],
                     wake[1], port, std::move(handler)));
}

CmListener::CmListener(const CmListenerOptions& options,
                       PeerAdmission admission, rdma_event_channel* channel,
                       rdma_cm_id* listen_id, int wake_read, int wake_write,
                       int port, Handler handler)
    : options_(options),
      channel_(channel),
      listen_id_(listen_id),
      wake_read_(wake_read),
      wake_write_(wake_write),
      port_(port),
      handler_(std::move(handler)),
      admission_(std::move(admission)) {
  thread_ = std::thread([this] { Serve(); });
}

CmListener::~CmListener() {
  const char byte = 1;
  (void)!write(wake_write_, &byte, 1);
  thread_.join();
  // The thread is gone: disconnect and release what it accepted.
  while (!peers_.empty()) Release(peers_.begin()->first);
  rdma_destroy_id(listen_id_);
  rdma_destroy_event_channel(channel_);
  close(wake_read_);
  close(wake_write_);
}

int64_t CmListener::refused() const {
  absl::MutexLock lock(&mutex_);
  return refused_;
}

void CmListener::Serve() {
  while (true) {
    pollfd fds[2] = {{channel_->fd, POLLIN, 0}, {wake_read_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if (fds[1].revents != 0) return;
    rdma_cm_event* event = nullptr;
    while (rdma_get_cm_event(channel_, &event) == 0) OnEvent(event);
  }
}

void CmListener::Release(rdma_cm_id* id) {
  auto it = peers_.find(id);
  if (it == peers_.end()) return;
  rdma_disconnect(id);
  it->second.accepted.reset();  // Retires the queue pair.
  // Frees the claimed rank's slot: a restarted peer may connect again.
  admission_.Release(it->second.rank, it->second.established);
  peers_.erase(it);
  rdma_destroy_id(id);
}

void CmListener::OnEvent(rdma_cm_event* event) {
  rdma_cm_id* id = event->id;
  const rdma_cm_event_type type = event->event;
  if (type != RDMA_CM_EVENT_CONNECT_REQUEST) {
    rdma_ack_cm_event(event);
    if (type == RDMA_CM_EVENT_ESTABLISHED) {
      auto it = peers_.find(id);
      if (it != peers_.end() && !it->second.established) {
        it->second.established = true;
        admission_.Established(it->second.rank);
      }
      return;
    }
    // The peer went away (disconnected, died, or its connection never
    // completed): free its queue pair and identifier.
    if (type == RDMA_CM_EVENT_DISCONNECTED ||
        type == RDMA_CM_EVENT_REJECTED ||
        type == RDMA_CM_EVENT_CONNECT_ERROR ||
        type == RDMA_CM_EVENT_UNREACHABLE ||
        type == RDMA_CM_EVENT_DEVICE_REMOVAL) {
      Release(id);
    }
    return;
  }
  const std::string data(
      static_cast<const char*>(event->param.conn.private_data),
      event->param.conn.private_data_len);
  rdma_ack_cm_event(event);
  char peer[INET_ADDRSTRLEN] = "?";
  if (sockaddr* a = rdma_get_peer_addr(id); a != nullptr && a->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a)->sin_addr, peer,
              sizeof(peer));
  }
  auto refuse = [&](const std::string& why) {
    std::fprintf(stderr,
                 "rdmaflow ibverbs: rank %d refused an rdmacm connection from "
                 "%s: %s\n",
                 options_.local_rank, peer, why.c_str());
    {
      absl::MutexLock lock(&mutex_);
      ++refused_;
    }
    const std::string reason = why.substr(0, 140);
    rdma_reject(id, reason.data(), static_cast<uint8_t>(reason.size()));
    rdma_destroy_id(id);
  };
  absl::StatusOr<CmRequest> cm_request = DecodeCmRequest(
      data, options_.job_token,
      HandshakeTarget{options_.local_rank, options_.instance});
  if (!cm_request.ok()) {
    refuse(std::string(cm_request.status().message()));
    return;
  }
  const CmPeerInfo* request = &cm_request->info;
  const absl::Status admitted = admission_.Admit(
      Claim{request->rank, cm_request->nonce,
            ClaimerOf(peer, request->marker_address, request->marker_rkey)});
  if (!admitted.ok()) {
    refuse(absl::StrCat(
        admitted.code() == absl::StatusCode::kUnavailable ? kBusyPrefix : "",
        admitted.message()));
    return;
  }
  // From here every refusal frees the slot it took.
  auto refuse_admitted = [&](absl::string_view why) {
    admission_.Release(request->rank, /*established=*/false);
    refuse(std::string(why));
  };
  absl::StatusOr<CmAccepted> accepted = handler_(*request, id);
  if (!accepted.ok()) {
    refuse_admitted(accepted.status().message());
    return;
  }
  const absl::StatusOr<std::string> answer =
      EncodeCmAnswer(accepted->answer, cm_request->nonce, options_.job_token);
  if (!answer.ok()) {
    refuse_admitted(answer.status().message());
    return;
  }
  rdma_conn_param param{};
  param.private_data = answer->data();
  param.private_data_len = static_cast<uint8_t>(answer->size());
  param.responder_resources = options_.rd_atomic;
  param.initiator_depth = options_.rd_atomic;
  param.retry_count = options_.retry_count;
  param.rnr_retry_count = 7;
  param.srq = 1;
  param.qp_num = accepted->qp_num;
  peers_[id] = Peer{std::move(accepted->peer), request->rank, false};
  if (rdma_accept(id, &param) != 0) {
    std::fprintf(stderr, "rdmaflow ibverbs: rdma_accept for rank %d: %s\n",
                 request->rank, std::strerror(errno));
    Release(id);
  }
}

// ---------------------------------------------------------------------------
// Active side

absl::StatusOr<std::unique_ptr<CmConnection>> CmConnection::Connect(
    const std::string& host, int port, const HandshakeTarget& target,
    const CmPeerInfo& request, absl::string_view job_token,
    absl::Duration timeout,
    const std::function<absl::StatusOr<ibv_qp*>(rdma_cm_id*)>& make_qp,
    uint8_t ack_timeout, uint8_t retry_count, uint8_t rd_atomic,
    CmPeerInfo* answer) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration backoff = kFirstBackoff;
  while (true) {
    absl::StatusOr<std::unique_ptr<CmConnection>> connection =
        Attempt(host, port, target, request, job_token, deadline, make_qp,
                ack_timeout, retry_count, rd_atomic, answer);
    const bool busy =
        !connection.ok() &&
        absl::StrContains(connection.status().message(),
                          absl::StrCat("refused the connection: ",
                                       kBusyPrefix));
    if (!busy || absl::Now() + backoff >= deadline) return connection;
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

absl::StatusOr<std::unique_ptr<CmConnection>> CmConnection::Attempt(
    const std::string& host, int port, const HandshakeTarget& target,
    const CmPeerInfo& request, absl::string_view job_token,
    absl::Time deadline,
    const std::function<absl::StatusOr<ibv_qp*>(rdma_cm_id*)>& make_qp,
    uint8_t ack_timeout, uint8_t retry_count, uint8_t rd_atomic,
    CmPeerInfo* answer) {
  ASSIGN_OR_RETURN(sockaddr_in address, Ipv4(host, port));
  const absl::Duration timeout =
      std::max(deadline - absl::Now(), absl::Milliseconds(1));
  ASSIGN_OR_RETURN(rdma_event_channel * channel, NewEventChannel());
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(channel, &id, nullptr, RDMA_PS_TCP) != 0) {
    absl::Status status = CmError(errno, "rdma_create_id");
    rdma_destroy_event_channel(channel);
    return status;
  }
  // From here the connection owns both, whatever happens.
  std::unique_ptr<CmConnection> connection(new CmConnection(channel, id));
  const std::string where = absl::StrCat(host, ":", port);
  const int resolve_ms = static_cast<int>(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout)));
  // Waits for `expected`, turning anything else into an error.
  uint32_t remote_qp_num = 0;
  auto await = [&](rdma_cm_event_type expected, const char* step,
                   std::string* data) -> absl::Status {
    rdma_cm_event* event = NextEvent(channel, deadline);
    if (event == nullptr) {
      return absl::UnavailableError(absl::StrCat(
          "rdmacm ", step, " towards ", where, " did not finish within ",
          absl::FormatDuration(timeout)));
    }
    const rdma_cm_event_type type = event->event;
    const int status = event->status;
    std::string private_data;
    if (event->param.conn.private_data != nullptr) {
      private_data.assign(
          static_cast<const char*>(event->param.conn.private_data),
          event->param.conn.private_data_len);
    }
    if (type == RDMA_CM_EVENT_CONNECT_RESPONSE) {
      remote_qp_num = event->param.conn.qp_num;
    }
    rdma_ack_cm_event(event);
    if (type == expected) {
      if (data != nullptr) *data = std::move(private_data);
      return absl::OkStatus();
    }
    if (type == RDMA_CM_EVENT_REJECTED) {
      // A refusal carries its reason as text (the rest is zero padding).
      const std::string reason(private_data.c_str());
      return absl::UnavailableError(absl::StrCat(
          "the rdmacm listener at ", where, " refused the connection",
          reason.empty() ? absl::StrCat(" (status ", status, ")")
                         : absl::StrCat(": ", reason)));
    }
    return absl::UnavailableError(absl::StrCat(
        "rdmacm ", step, " towards ", where, " failed: ",
        rdma_event_str(type), " (status ", status, ")"));
  };
  if (rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&address),
                        resolve_ms) != 0) {
    return CmError(errno, absl::StrCat("rdma_resolve_addr ", where));
  }
  RETURN_IF_ERROR(await(RDMA_CM_EVENT_ADDR_RESOLVED, "address resolution",
                        nullptr));
  if (rdma_resolve_route(id, resolve_ms) != 0) {
    return CmError(errno, absl::StrCat("rdma_resolve_route ", where));
  }
  RETURN_IF_ERROR(await(RDMA_CM_EVENT_ROUTE_RESOLVED, "route resolution",
                        nullptr));
  ASSIGN_OR_RETURN(ibv_qp * qp, make_qp(id));
  // A fresh nonce per attempt: the listener refuses one it has seen.
  ASSIGN_OR_RETURN(const uint64_t nonce, RandomNonce());
  ASSIGN_OR_RETURN(const std::string data,
                   EncodeCmRequest(request, nonce, target, job_token));
  rdma_conn_param param{};
  param.private_data = data.data();
  param.private_data_len = static_cast<uint8_t>(data.size());
  param.responder_resources = rd_atomic;
  param.initiator_depth = rd_atomic;
  param.retry_count = retry_count;
  param.rnr_retry_count = 7;
  param.srq = 1;
  param.qp_num = qp->qp_num;
  if (rdma_connect(id, &param) != 0) {
    return CmError(errno, absl::StrCat("rdma_connect ", where));
  }
  std::string reply;
  RETURN_IF_ERROR(await(RDMA_CM_EVENT_CONNECT_RESPONSE, "connection", &reply));
  absl::StatusOr<CmPeerInfo> decoded = DecodeCmAnswer(reply, nonce, job_token);
  if (!decoded.ok()) {
    rdma_reject(id, nullptr, 0);
    return absl::Status(decoded.status().code(),
                        absl::StrCat("the rdmacm answer from ", where, ": ",
                                     decoded.status().message()));
  }
  RETURN_IF_ERROR(ConnectQueuePairWithCm(id, qp, ack_timeout, retry_count));
  if (rdma_establish(id) != 0) {
    return CmError(errno, absl::StrCat("rdma_establish ", where));
  }
  *answer = *decoded;
  connection->remote_qp_num_ = remote_qp_num;
  return connection;
}

CmConnection::~CmConnection() {
  if (!disconnected_) rdma_disconnect(id_);
  // Events still queued must be acknowledged before the id goes.
  rdma_cm_event* event = nullptr;
  while (rdma_get_cm_event(channel_, &event) == 0) rdma_ack_cm_event(event);
  rdma_destroy_id(id_);
  rdma_destroy_event_channel(channel_);
}

bool CmConnection::Disconnected() {
  rdma_cm_event* event = nullptr;
  while (!disconnected_ && rdma_get_cm_event(channel_, &event) == 0) {
    const rdma_cm_event_type type = event->event;
    rdma_ack_cm_event(event);
    disconnected_ = type == RDMA_CM_EVENT_DISCONNECTED ||
                    type == RDMA_CM_EVENT_DEVICE_REMOVAL ||
                    type == RDMA_CM_EVENT_CONNECT_ERROR ||
                    type == RDMA_CM_EVENT_UNREACHABLE ||
                    type == RDMA_CM_EVENT_REJECTED;
  }
  return disconnected_;
}

}  // namespace rdmaflow::rdma::ibverbs
