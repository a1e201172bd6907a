// File: ibverbs_transport.cc
#include "rdma/ibverbs/ibverbs_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>

#include <algorithm>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/numeric/bits.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rdma/ibverbs/ibverbs_endpoint.h"
#include "rdma/ibverbs/ibverbs_status.h"

namespace rdmaflow::rdma::ibverbs {
namespace {

// The address peers use for the handshake when none is configured.
std::string DefaultBootstrapHost(const Device& device) {
  if (!device.gid_ipv4.empty()) return device.gid_ipv4;
  char name[256] = {};
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* found = nullptr;
  if (gethostname(name, sizeof(name) - 1) == 0 &&
      getaddrinfo(name, nullptr, &hints, &found) == 0 && found != nullptr) {
    char text[INET_ADDRSTRLEN];
    inet_ntop(AF_INET,
              &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, text,
              sizeof(text));
    freeaddrinfo(found);
    return text;
  }
  return "127.0.0.1";
}

}  // namespace

absl::StatusOr<std::unique_ptr<IbverbsTransport>> IbverbsTransport::Create(
    const IbverbsTransportOptions& options) {
  if (options.rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " is negative"));
  }
  if (options.world_size < 0 ||
      (options.world_size > 0 && options.rank >= options.world_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " is outside world_size ",
                     options.world_size));
  }
  // The queue pair's depth (2 per operation and a few, uint32_t) must hold it.
  if (options.max_outstanding_per_endpoint == 0 ||
      options.max_outstanding_per_endpoint > (uint64_t{UINT32_MAX} - 4) / 2 ||
      options.signal_every < 1 ||
      options.ack_timeout < 1 || options.ack_timeout > 31 ||
      options.retry_count < 0 || options.retry_count > 7 ||
      options.receive_depth < 1 || options.max_pending_queue_pairs < 1 ||
      options.handshake_timeout <= absl::ZeroDuration() ||
      options.close_timeout <= absl::ZeroDuration() ||
      options.notify_slots < kMinNotifySlots ||
      options.notify_slots > kMaxNotifySlots ||
      !absl::has_single_bit(options.notify_slots) ||
      options.qps_per_peer < 1 ||
      options.qps_per_peer > kMaxQueuePairsPerPeer ||
      options.stripe_min < kPage || options.max_endpoints_per_peer < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ibverbs options out of range: max_outstanding 1..2^31-3, signal_every >= "
        "1, ack_timeout 1..31, retry_count 0..7, receive_depth >= 1, "
        "max_pending_queue_pairs >= 1, handshake_timeout and close_timeout "
        "> 0, notify_slots a power of two in [",
        kMinNotifySlots, ", ", kMaxNotifySlots, "], qps_per_peer 1..",
        kMaxQueuePairsPerPeer, ", stripe_min >= 4096, max_endpoints_per_peer "
        ">= 1"));
  }
  // The token before the device: a misconfigured job is told so even on a
  // host without RDMA.
  JobToken token;
  if (options.job_token.has_value()) {
    if (options.job_token->empty() ||
        options.job_token->size() > kMaxJobTokenBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the ibverbs job token must have 1..", kMaxJobTokenBytes,
          " bytes, not ", options.job_token->size()));
    }
    token = JobToken{*options.job_token, "IbverbsTransportOptions::job_token"};
  } else {
    ASSIGN_OR_RETURN(token, JobTokenFromEnvironment());
  }
  std::unique_ptr<IbverbsTransport> transport(
      new IbverbsTransport(options, std::move(token)));
  RETURN_IF_ERROR(transport->Init());
  return transport;
}

absl::Status IbverbsTransport::Init() {
  ASSIGN_OR_RETURN(Device device, OpenDevice(options_.device));
  context_ = std::make_shared<VerbsContext>();
  context_->device = std::move(device);
  const Device& d = context_->device;
  context_->pd.reset(ibv_alloc_pd(d.context.get()));
  if (context_->pd == nullptr) {
    return VerbsError(errno, absl::StrCat("ibv_alloc_pd on ", d.name));
  }
  // Room for every endpoint's requests; the device caps it.
  const int cq_depth = std::min(d.device_attr.max_cqe, 1 << 16);
  if (options_.completion_events) {
    channel_.reset(ibv_create_comp_channel(d.context.get()));
    if (channel_ == nullptr) {
      return VerbsError(errno,
                        absl::StrCat("ibv_create_comp_channel on ", d.name));
    }
    // Events are read only after poll() said so, never blocking.
    const int flags = fcntl(channel_->fd, F_GETFL);
    if (flags < 0 || fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
      return VerbsError(errno, "making the completion channel non-blocking");
    }
  }
  send_cq_.reset(ibv_create_cq(d.context.get(), cq_depth, nullptr,
                               channel_.get(), 0));
  recv_cq_.reset(ibv_create_cq(d.context.get(), cq_depth, nullptr,
                               channel_.get(), 0));
  if (send_cq_ == nullptr || recv_cq_ == nullptr) {
    return VerbsError(errno, absl::StrCat("ibv_create_cq on ", d.name));
  }
  ibv_srq_init_attr srq_attr{};
  srq_attr.attr.max_wr =
      std::min(options_.receive_depth, d.device_attr.max_srq_wr);
  srq_attr.attr.max_sge = 1;
  srq_.reset(ibv_create_srq(context_->pd.get(), &srq_attr));
  if (srq_ == nullptr) {
    return VerbsError(errno, absl::StrCat("ibv_create_srq on ", d.name));
  }
  registrar_ = std::make_unique<Registrar>(context_, options_.rank);
  ASSIGN_OR_RETURN(marker_, registrar_->Allocate(kPage));
  SendQueueOptions queues;
  queues.rank = options_.rank;
  queues.signal_every = options_.signal_every;
  // Every operation may be followed by a marker.
  queues.send_depth = 2 * options_.max_outstanding_per_endpoint + 4;
  queues.close_timeout = options_.close_timeout;
  queues.max_message = std::max<uint64_t>(d.port_attr.max_msg_sz, kPage);
  queues_ = std::make_unique<SendQueues>(queues, send_cq_.get(), marker_);
  inbox_ = std::make_unique<NotifyInbox>(options_.rank, srq_.get(), recv_cq_.get(), peers_,
                                         options_.notify_slots);
  RETURN_IF_ERROR(inbox_->Start(static_cast<int>(srq_attr.attr.max_wr)));
  factory_.context = context_;
  factory_.send_cq = send_cq_.get();
  factory_.recv_cq = recv_cq_.get();
  factory_.srq = srq_.get();
  factory_.marker = &marker_;
  factory_.options.send_depth = static_cast<uint32_t>(queues.send_depth);
  factory_.options.max_inline = options_.max_inline;
  factory_.options.timeout = options_.ack_timeout;
  factory_.options.retry_count = options_.retry_count;
  factory_.rank = options_.rank;
  AcceptorOptions accept;
  accept.offer_rings = options_.notify == NotifyMode::kFlag;
  accept.notify_slots = options_.notify_slots;
  accept.ack_timeout = options_.ack_timeout;
  accept.retry_count = options_.retry_count;
  acceptor_ = std::make_unique<Acceptor>(factory_, *registrar_, peers_, accept);
  ConnectorOptions connect;
  connect.use_rdmacm = options_.use_rdmacm;
  connect.flags = options_.notify == NotifyMode::kFlag;
  connect.qps_per_peer = options_.qps_per_peer;
  connect.connect_timeout = options_.connect_timeout;
  connect.ack_timeout = options_.ack_timeout;
  connect.retry_count = options_.retry_count;
  connect.job_token = job_token_.value;
  connector_ = std::make_unique<Connector>(factory_, *registrar_, *queues_, connect);
  const std::string default_host = DefaultBootstrapHost(d);
  ASSIGN_OR_RETURN(BindChoice bind,
                   ChooseBindAddress(options_.bind_address.empty()
                                         ? options_.bootstrap_host
                                         : options_.bind_address,
                                     default_host));
  BootstrapListenerOptions listen;
  listen.bind_address = bind.address;
  listen.job_token = job_token_.value;
  listen.job_token_source = job_token_.source;
  listen.local_rank = options_.rank;
  listen.world_size = options_.world_size;
  listen.handshake_timeout = options_.handshake_timeout;
  listen.max_pending_queue_pairs = options_.max_pending_queue_pairs;
  ASSIGN_OR_RETURN(instance_, RandomNonce());
  listen.instance = instance_;
  listen.max_connections_per_rank =
      options_.max_endpoints_per_peer * options_.qps_per_peer;
  std::string host = options_.bootstrap_host;
  if (host.empty()) {
    host = bind.address == "0.0.0.0" ? default_host : bind.address;
  }
  int port = 0;
  if (options_.use_rdmacm) {
    CmListenerOptions cm;
    // The connection manager needs the device interface's own address.
    cm.bind_address = bind.address == "0.0.0.0" ? default_host : bind.address;
    cm.job_token = job_token_.value;
    cm.local_rank = options_.rank;
    cm.world_size = options_.world_size;
    cm.instance = instance_;
    cm.max_pending_queue_pairs = listen.max_pending_queue_pairs;
    cm.max_connections = listen.max_connections;
    cm.max_connections_per_rank = listen.max_connections_per_rank;
    cm.max_remembered_nonces = listen.max_remembered_nonces;
    cm.rd_atomic = static_cast<uint8_t>(
        std::max(1, std::min(16, d.device_attr.max_qp_rd_atom)));
    cm.retry_count = static_cast<uint8_t>(options_.retry_count);
    ASSIGN_OR_RETURN(cm_listener_,
                     CmListener::Start(cm, [this](const CmPeerInfo& request,
                                                  rdma_cm_id* id) {
                       return acceptor_->AcceptCm(request, id);
                     }));
    port = cm_listener_->port();
    handshake_address_ = absl::StrCat(cm.bind_address, ":", port,
                                      " (rdmacm), ", bind.why);
  } else {
    ASSIGN_OR_RETURN(listener_,
                     BootstrapListener::Start(
                         listen, [this](const QueuePairInfo& request) {
                           return acceptor_->Accept(request);
                         }));
    port = listener_->port();
    handshake_address_ = absl::StrCat(listener_->bound_address(), ":", port,
                                      ", ", bind.why);
  }
  address_ = FormatAddress(options_.use_rdmacm, options_.rank, host, port, d.name, instance_);
  description_ = absl::StrCat(
      d.description, "; ", options_.use_rdmacm ? "rdmacm" : "handshake",
      " at ", host, ":", port, " (bound to ", handshake_address_,
      "; job token: ", job_token_.source, ")");
  return absl::OkStatus();
}

// The listener goes first: it releases the accepted queue pairs into
// AcceptedPeers' retired ones, destroyed with it (before the CQs and SRQ).
IbverbsTransport::~IbverbsTransport() {
  listener_.reset();
  cm_listener_.reset();
}

IbverbsTransportStats IbverbsTransport::stats() const {
  IbverbsTransportStats stats;
  stats.accepted_queue_pairs = peers_.accepted();
  stats.retired_queue_pairs = peers_.retired();
  stats.fenced_queue_pairs = queues_ != nullptr ? queues_->fenced() : 0;
  if (listener_ != nullptr) stats.listener = listener_->stats();
  if (cm_listener_ != nullptr) stats.listener.refused = cm_listener_->refused();
  return stats;
}

Capabilities IbverbsTransport::capabilities() const {
  Capabilities caps;
  caps.backend = kBackend;
  caps.description = absl::StrCat(
      description_, "; RC, signal every ", options_.signal_every,
      ", inline <= ", options_.max_inline, " B",
      options_.qps_per_peer > 1
          ? absl::StrCat(", ", options_.qps_per_peer, " QPs per peer")
          : "",
      options_.completion_events ? ", completion events" : "", ", notify ",
      options_.notify == NotifyMode::kFlag
          ? absl::StrCat("flag (", options_.notify_slots, "-slot rings)")
          : std::string("imm"));
  caps.one_sided_allocate = true;
  caps.max_outstanding_per_endpoint = options_.max_outstanding_per_endpoint;
  return caps;
}

absl::StatusOr<MemoryRegion> IbverbsTransport::Allocate(size_t bytes) {
  return registrar_->Allocate(bytes);
}

absl::StatusOr<MemoryRegion> IbverbsTransport::Register(absl::Span<std::byte> memory) {
  return registrar_->Register(memory);
}

absl::StatusOr<MemoryRegion> IbverbsTransport::RegisterDmaBuf(const DmaBufSpan& span) {
  return registrar_->RegisterDmaBuf(span);
}

absl::StatusOr<std::unique_ptr<Endpoint>> IbverbsTransport::Connect(const PeerInfo& peer) {
  ASSIGN_OR_RETURN(std::vector<std::shared_ptr<EndpointState>> lanes, connector_->Connect(peer));
  // Nothing arrives on these queue pairs (the peer's side of them only
  // receives our operations), so AcceptedPeers does not need them.
  for (const auto& lane : lanes) queues_->Add(lane);
  return std::make_unique<IbverbsEndpoint>(queues_.get(), registrar_->context(),
                                           options_.max_outstanding_per_endpoint,
                                           std::move(lanes), options_.stripe_min);
}

absl::StatusOr<int> IbverbsTransport::Progress() {
  // Taken before the receive queue and the rings are drained: what the
  // retiring queue pairs delivered is there already (AcceptedPeers::Retire).
  AcceptedPeers::Changes changes;
  if (peers_.TakeChanges(changes)) {
    inbox_->Adopt(std::move(changes.rings), std::move(changes.ranks));
  }
  // Should a poll fail below, the retired queue pairs still go with their
  // rings: a ring left behind would return credits on a destroyed one.
  absl::Cleanup drop_retired = [&] {
    if (!changes.retiring.empty()) DropRetired(changes.retiring);
  };
  // Again only while a poll came back full.
  while (true) {
    ASSIGN_OR_RETURN(int n, queues_->Poll());
    if (n < SendQueues::kPollBatch) break;
  }
  ASSIGN_OR_RETURN(const int received, inbox_->PollReceives());
  const int flagged = inbox_->HasRings() ? inbox_->PollRings() : 0;
  // Their rings were polled a last time above (the queue pairs are in the
  // error state: nothing more lands); then the rings and queue pairs go.
  if (!changes.retiring.empty()) DropRetired(changes.retiring);
  queues_->WatchPeers();
  queues_->SweepIdleTails();
  return queues_->FireCompletions() + received + flagged;
}

void IbverbsTransport::DropRetired(std::vector<std::pair<uint32_t, QpPtr>>& retiring) {
  std::vector<uint32_t> qpns;
  for (const auto& [qpn, qp] : retiring) qpns.push_back(qpn);
  peers_.Forget(qpns);
  inbox_->Drop(qpns);
  retiring.clear();  // Destroys them.
}

bool IbverbsTransport::WaitForActivity(absl::Duration timeout) {
  if (channel_ == nullptr) return Transport::WaitForActivity(timeout);
  if (!armed_) {
    if (ibv_req_notify_cq(send_cq_.get(), 0) != 0 ||
        ibv_req_notify_cq(recv_cq_.get(), 0) != 0) {
      return Transport::WaitForActivity(timeout);
    }
    armed_ = true;
  }
  // What arrived before the queues were armed raises no event: take it now
  // (Progress() fires its callbacks and hands out its notifications).
  absl::StatusOr<int> sent = queues_->Poll();
  absl::StatusOr<int> received = inbox_->PollReceives();
  const int flagged = inbox_->HasRings() ? inbox_->PollRings() : 0;
  if (!sent.ok() || !received.ok() || *sent > 0 || *received > 0 ||
      flagged > 0 || !inbox_->empty() || queues_->HasCompletions()) {
    return true;
  }
  const timespec wait = absl::ToTimespec(
      std::max(absl::ZeroDuration(), timeout));
  pollfd p{channel_->fd, POLLIN, 0};
  if (ppoll(&p, 1, &wait, nullptr) <= 0) return false;
  // Read every pending event (each acknowledged, as destroying a CQ needs);
  // the queues are armed again by the next wait.
  ibv_cq* cq = nullptr;
  void* cq_context = nullptr;
  while (ibv_get_cq_event(channel_.get(), &cq, &cq_context) == 0) {
    ibv_ack_cq_events(cq, 1);
  }
  armed_ = false;
  return true;
}

std::optional<Notification> IbverbsTransport::PollNotification() {
  return inbox_->Pop();
}

}  // namespace rdmaflow::rdma::ibverbs
