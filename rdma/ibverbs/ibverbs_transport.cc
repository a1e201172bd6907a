// File: ibverbs_transport.cc
#include "rdma/ibverbs/ibverbs_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <type_traits>

#include "absl/cleanup/cleanup.h"
#include "absl/container/inlined_vector.h"
#include "absl/numeric/bits.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/coarse_clock.h"
#include "common/status_macros.h"
#include "rdma/ibverbs/ibverbs_endpoint.h"
#include "rdma/ibverbs/ibverbs_probe.h"
#include "rdma/ibverbs/ibverbs_status.h"

namespace rdmaflow::rdma::ibverbs {
namespace {

// Version 2: the listener's instance id as a sixth field.
constexpr char kAddressMagic[] = "ibverbs2";
constexpr char kAddressMagicCm[] = "ibverbs2cm";
constexpr char kKeyMagic[] = "IBV1";
constexpr int kAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
constexpr size_t kPage = 4096;
constexpr size_t kMarkerBytes = 8;
constexpr uint64_t kSeqMask = (uint64_t{1} << kSeqBits) - 1;
// Completions taken per ibv_poll_cq.
constexpr int kPollBatch = 32;
constexpr int kMaxQueuePairsPerPeer = 16;

uint32_t RandomPsn() {
  static thread_local std::mt19937 rng(std::random_device{}());
  return rng() & 0xffffff;
}

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

absl::Status RegistrationError(int err, size_t bytes) {
  if (err == ENOMEM || err == EPERM || err == EFAULT || err == EAGAIN) {
    rlimit limit{};
    getrlimit(RLIMIT_MEMLOCK, &limit);
    std::string current =
        limit.rlim_cur == RLIM_INFINITY
            ? std::string("unlimited")
            : absl::StrCat(limit.rlim_cur / 1024, " KiB");
    return absl::ResourceExhaustedError(absl::StrCat(
        "ibv_reg_mr of ", bytes, " bytes failed: ", std::strerror(err),
        ". The locked-memory limit (ulimit -l) is ", current,
        "; raise it (ulimit -l unlimited; memlock in "
        "/etc/security/limits.conf; LimitMEMLOCK= for systemd; "
        "--ulimit memlock=-1 for containers)"));
  }
  return VerbsError(err, absl::StrCat("ibv_reg_mr of ", bytes, " bytes"));
}

}  // namespace

std::string PackKey(uint32_t rkey) {
  std::string key(kKeyMagic, 4);
  key.append(reinterpret_cast<const char*>(&rkey), sizeof(rkey));
  return key;
}

absl::StatusOr<uint32_t> UnpackKey(absl::string_view packed, int peer_rank) {
  if (packed.size() != 8 || packed.substr(0, 4) != kKeyMagic) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the remote key of rank ", peer_rank,
        "'s region is not an ibverbs key (", packed.size(), " bytes)"));
  }
  uint32_t rkey;
  std::memcpy(&rkey, packed.data() + 4, sizeof(rkey));
  return rkey;
}

// What the handshake listener keeps for a peer that connected to us: its
// queue pair, retired when the listener lets go of it.
class AcceptedQueuePair final : public AcceptedPeer {
 public:
  AcceptedQueuePair(IbverbsTransport* transport, uint32_t qpn)
      : transport_(transport), qpn_(qpn) {}
  ~AcceptedQueuePair() override { transport_->RetireAccepted(qpn_); }

 private:
  IbverbsTransport* transport_;
  uint32_t qpn_;
};

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
  if (options.max_outstanding_per_endpoint == 0 || options.signal_every < 1 ||
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
        "ibverbs options out of range: max_outstanding >= 1, signal_every >= "
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
  int receives = srq_attr.attr.max_wr;
  RETURN_IF_ERROR(PostReceives(receives));
  // Consumed receives go back in batches, a few doorbells per queue.
  repost_batch_ = std::max<int>(1, std::min<int>(32, srq_attr.attr.max_wr / 8));
  ASSIGN_OR_RETURN(marker_, Allocate(kPage));
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
                       return AcceptCm(request, id);
                     }));
    port = cm_listener_->port();
    handshake_address_ = absl::StrCat(cm.bind_address, ":", port,
                                      " (rdmacm), ", bind.why);
  } else {
    ASSIGN_OR_RETURN(listener_,
                     BootstrapListener::Start(
                         listen, [this](const QueuePairInfo& request) {
                           return Accept(request);
                         }));
    port = listener_->port();
    handshake_address_ = absl::StrCat(listener_->bound_address(), ":", port,
                                      ", ", bind.why);
  }
  address_ = absl::StrCat(
      options_.use_rdmacm ? kAddressMagicCm : kAddressMagic, "|",
      options_.rank, "|", host, "|", port, "|", d.name, "|",
      absl::Hex(instance_, absl::kZeroPad16));
  description_ = absl::StrCat(
      d.description, "; ", options_.use_rdmacm ? "rdmacm" : "handshake",
      " at ", host, ":", port, " (bound to ", handshake_address_,
      "; job token: ", job_token_.source, ")");
  return absl::OkStatus();
}

// The listener goes first: it releases the accepted queue pairs into
// retired_, destroyed with the other members (before the CQs and SRQ).
IbverbsTransport::~IbverbsTransport() {
  listener_.reset();
  cm_listener_.reset();
}

IbverbsTransportStats IbverbsTransport::stats() const {
  IbverbsTransportStats stats;
  {
    absl::MutexLock lock(&mutex_);
    stats.accepted_queue_pairs = accepted_.size();
    stats.retired_queue_pairs = retired_count_;
  }
  stats.fenced_queue_pairs = fenced_count_;
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

absl::StatusOr<MemoryRegion> IbverbsTransport::RegisterMemory(void* data,
                                                              size_t bytes,
                                                              void* owned) {
  MrPtr mr(ibv_reg_mr(context_->pd.get(), data, bytes, kAccess));
  if (mr == nullptr) {
    int err = errno;
    std::free(owned);
    return RegistrationError(err, bytes);
  }
  RemoteRegion descriptor;
  descriptor.backend = kBackend;
  descriptor.owner_rank = options_.rank;
  descriptor.address = reinterpret_cast<uintptr_t>(data);
  descriptor.length = bytes;
  descriptor.packed_key = PackKey(mr->rkey);
  auto registration =
      std::make_unique<VerbsRegistration>(context_, std::move(mr), owned);
  return MemoryRegion(static_cast<std::byte*>(data), bytes,
                      std::move(descriptor), std::move(registration));
}

absl::StatusOr<MemoryRegion> IbverbsTransport::RegisterDmaBuf(
    const DmaBufSpan& span) {
  if (span.fd < 0 || span.bytes == 0 || span.address == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "registering device memory: the dma-buf span (descriptor ", span.fd,
        ", ", span.bytes, " bytes at device address ", span.address,
        ") is empty or has no descriptor"));
  }
  MrPtr mr(ibv_reg_dmabuf_mr(context_->pd.get(), span.offset, span.bytes,
                             span.address, span.fd, kAccess));
  if (mr == nullptr) {
    return DmaBufRegistrationError(errno, context_->device.name, span.bytes);
  }
  RemoteRegion descriptor;
  descriptor.backend = kBackend;
  descriptor.owner_rank = options_.rank;
  descriptor.address = span.address;
  descriptor.length = span.bytes;
  descriptor.packed_key = PackKey(mr->rkey);
  descriptor.memory_kind = device::MemoryKind::kDevice;
  auto registration =
      std::make_unique<VerbsRegistration>(context_, std::move(mr), nullptr);
  return MemoryRegion(reinterpret_cast<std::byte*>(span.address), span.bytes,
                      std::move(descriptor), std::move(registration));
}

absl::StatusOr<MemoryRegion> IbverbsTransport::Allocate(size_t bytes) {
  if (bytes == 0) {
    return absl::InvalidArgumentError("cannot allocate a 0-byte region");
  }
  const size_t rounded = (bytes + kPage - 1) / kPage * kPage;
  void* memory = std::aligned_alloc(kPage, rounded);
  if (memory == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", bytes, " bytes"));
  }
  std::memset(memory, 0, rounded);
  return RegisterMemory(memory, bytes, memory);
}

absl::StatusOr<MemoryRegion> IbverbsTransport::Register(
    absl::Span<std::byte> memory) {
  if (memory.data() == nullptr || memory.empty()) {
    return absl::InvalidArgumentError("cannot register an empty span");
  }
  return RegisterMemory(memory.data(), memory.size(), nullptr);
}

absl::Status IbverbsTransport::PostReceives(int& count) {
  // Linked in batches: one call (and one doorbell) per batch; `count` drops
  // by each batch taken, so a failure leaves only the rest to post.
  constexpr int kBatch = 32;
  ibv_recv_wr wrs[kBatch];
  while (count > 0) {
    const int n = std::min(count, kBatch);
    for (int i = 0; i < n; ++i) {
      wrs[i] = {};
      wrs[i].num_sge = 0;  // WRITE WITH IMMEDIATE carries no payload.
      wrs[i].next = i + 1 < n ? &wrs[i + 1] : nullptr;
    }
    ibv_recv_wr* bad = nullptr;
    if (int rc = ibv_post_srq_recv(srq_.get(), wrs, &bad); rc != 0) {
      return VerbsError(rc, "ibv_post_srq_recv");
    }
    count -= n;
  }
  return absl::OkStatus();
}

QueuePairOptions IbverbsTransport::QpOptions() const {
  QueuePairOptions qp;
  // Every operation may be followed by a marker.
  qp.send_depth = 2 * options_.max_outstanding_per_endpoint + 4;
  qp.max_inline = options_.max_inline;
  qp.timeout = options_.ack_timeout;
  qp.retry_count = options_.retry_count;
  return qp;
}

QueuePairInfo IbverbsTransport::WithMarker(QueuePairInfo info) const {
  info.marker_address = reinterpret_cast<uintptr_t>(marker_.data());
  absl::StatusOr<uint32_t> rkey =
      UnpackKey(marker_.descriptor().packed_key, options_.rank);
  info.marker_rkey = rkey.ok() ? *rkey : 0;
  return info;
}

absl::StatusOr<Accepted> IbverbsTransport::Accept(
    const QueuePairInfo& request) {
  return AcceptQueuePair(
      request.rank, request.notify_address, request.notify_rkey,
      [&](ibv_qp* qp, uint32_t psn) {
        return ConnectQueuePair(qp, context_->device, psn, request,
                                QpOptions());
      });
}

absl::Status IbverbsTransport::CheckCmDevice(rdma_cm_id* id,
                                             int peer_rank) const {
  const std::string& ours = context_->device.name;
  const char* routed =
      id->verbs != nullptr ? ibv_get_device_name(id->verbs->device) : nullptr;
  if (routed != nullptr && ours == routed) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "rdmacm reaches rank ", peer_rank, " through ",
      routed == nullptr ? "no device" : routed, ", not this transport's ",
      ours, "; set device= (or bind_address=) so that they agree"));
}

absl::StatusOr<CmAccepted> IbverbsTransport::AcceptCm(
    const CmPeerInfo& request, rdma_cm_id* id) {
  // The queue pair lives on our device: the connection must come in there.
  RETURN_IF_ERROR(CheckCmDevice(id, request.rank));
  ASSIGN_OR_RETURN(
      Accepted accepted,
      AcceptQueuePair(request.rank, request.notify_address,
                      request.notify_rkey, [&](ibv_qp* qp, uint32_t) {
                        return ConnectQueuePairWithCm(
                            id, qp, static_cast<uint8_t>(options_.ack_timeout),
                            static_cast<uint8_t>(options_.retry_count));
                      }));
  CmAccepted cm;
  cm.qp_num = accepted.info.qpn;
  cm.answer.rank = options_.rank;
  cm.answer.marker_address = accepted.info.marker_address;
  cm.answer.marker_rkey = accepted.info.marker_rkey;
  cm.answer.notify_address = accepted.info.notify_address;
  cm.answer.notify_rkey = accepted.info.notify_rkey;
  cm.answer.notify_slots = accepted.info.notify_slots;
  cm.peer = std::move(accepted.peer);
  return cm;
}

absl::StatusOr<Accepted> IbverbsTransport::AcceptQueuePair(
    int rank, uint64_t credit_address, uint32_t credit_rkey,
    absl::FunctionRef<absl::Status(ibv_qp*, uint32_t psn)> connect) {
  const Device& d = context_->device;
  uint32_t inline_bytes = 0;
  ASSIGN_OR_RETURN(QpPtr qp,
                   CreateQueuePair(d, context_->pd.get(), send_cq_.get(),
                                   recv_cq_.get(), srq_.get(), QpOptions(),
                                   &inline_bytes));
  const uint32_t psn = RandomPsn();
  RETURN_IF_ERROR(connect(qp.get(), psn));
  Accepted accepted;
  accepted.info = WithMarker(LocalInfo(d, options_.rank, qp.get(), psn));
  const uint32_t qpn = qp->qp_num;
  // A ring for the peer's flag notifications, when it named where our
  // credits go (an 8-byte aligned word) and we take flags.
  std::unique_ptr<AcceptedRing> ring;
  if (options_.notify == NotifyMode::kFlag && credit_address != 0 &&
      credit_address % 8 == 0) {
    ring = std::make_unique<AcceptedRing>();
    const size_t bytes = size_t{options_.notify_slots} * kNotifyRecordBytes;
    ASSIGN_OR_RETURN(ring->memory, Allocate(bytes + kNotifyRecordBytes));
    ring->qpn = qpn;
    ring->rank = rank;
    ring->qp = qp.get();
    ring->max_inline = inline_bytes;
    ring->reader.emplace(reinterpret_cast<const uint64_t*>(ring->memory.data()),
                         options_.notify_slots);
    ring->credit_address = credit_address;
    ring->credit_rkey = credit_rkey;
    ASSIGN_OR_RETURN(accepted.info.notify_rkey,
                     UnpackKey(ring->memory.descriptor().packed_key,
                               options_.rank));
    accepted.info.notify_address =
        reinterpret_cast<uintptr_t>(ring->memory.data());
    accepted.info.notify_slots = options_.notify_slots;
  }
  {
    absl::MutexLock lock(&mutex_);
    rank_of_qp_[qpn] = rank;
    accepted_[qpn] = std::move(qp);
    if (ring != nullptr) new_rings_.push_back(std::move(ring));
    listener_changed_.store(true, std::memory_order_release);
  }
  accepted.peer = std::make_unique<AcceptedQueuePair>(this, qpn);
  return accepted;
}

void IbverbsTransport::RetireAccepted(uint32_t qpn) {
  absl::MutexLock lock(&mutex_);
  auto it = accepted_.find(qpn);
  if (it == accepted_.end()) return;
  // In the error state it takes no more writes; completions it produced
  // before are already in the receive CQ, which Progress() drains before it
  // destroys the queue pair and forgets its rank.
  if (absl::Status stopped = StopQueuePair(it->second.get()); !stopped.ok()) {
    std::fprintf(stderr, "rdmaflow ibverbs: retiring queue pair %u: %s\n",
                 qpn, std::string(stopped.message()).c_str());
  }
  retired_.emplace_back(qpn, std::move(it->second));
  accepted_.erase(it);
  listener_changed_.store(true, std::memory_order_release);
}

absl::StatusOr<std::unique_ptr<Endpoint>> IbverbsTransport::Connect(
    const PeerInfo& peer) {
  std::vector<std::string> parts = absl::StrSplit(peer.address, '|');
  int rank = -1;
  int port = 0;
  const absl::string_view magic =
      options_.use_rdmacm ? kAddressMagicCm : kAddressMagic;
  uint64_t instance = 0;
  if (parts.size() == 6 &&
      (parts[0] == kAddressMagic || parts[0] == kAddressMagicCm) &&
      parts[0] != magic) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", peer.rank, " connects with ",
        parts[0] == kAddressMagicCm ? "connect=rdmacm" : "connect=tcp",
        " and this rank with ",
        options_.use_rdmacm ? "connect=rdmacm" : "connect=tcp",
        "; every rank must use the same connect= parameter"));
  }
  if (parts.size() != 6 || parts[0] != magic ||
      !absl::SimpleAtoi(parts[1], &rank) ||
      !absl::SimpleAtoi(parts[3], &port) || port <= 0 || port > 65535 ||
      !absl::SimpleHexAtoi(parts[5], &instance)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the address of rank ", peer.rank,
        " is not an ibverbs address of this version; do all ranks use the "
        "ibverbs transport of the same rdmaflow?"));
  }
  if (rank != peer.rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the address given for rank ", peer.rank, " belongs to rank ", rank));
  }
  std::vector<std::shared_ptr<EndpointState>> lanes;
  for (int i = 0; i < options_.qps_per_peer; ++i) {
    ASSIGN_OR_RETURN(std::shared_ptr<EndpointState> lane,
                     ConnectLane(peer, parts[2], port,
                                 HandshakeTarget{peer.rank, instance}, i == 0));
    lanes.push_back(std::move(lane));
  }
  // Nothing arrives on these queue pairs (the peer's side of them only
  // receives our operations), so rank_of_qp_ does not need them.
  for (const auto& lane : lanes) endpoints_[lane->id] = lane;
  return std::make_unique<IbverbsEndpoint>(this, std::move(lanes),
                                           options_.stripe_min);
}

absl::StatusOr<std::shared_ptr<EndpointState>> IbverbsTransport::ConnectLane(
    const PeerInfo& peer, const std::string& host, int port,
    const HandshakeTarget& target, bool notifies) {
  const Device& d = context_->device;
  auto state = std::make_shared<EndpointState>();
  state->id = next_endpoint_id_++;
  state->peer_rank = peer.rank;
  ASSIGN_OR_RETURN(state->qp,
                   CreateQueuePair(d, context_->pd.get(), send_cq_.get(),
                                   recv_cq_.get(), srq_.get(), QpOptions(),
                                   &state->max_inline));
  const uint32_t psn = RandomPsn();
  QueuePairInfo local =
      WithMarker(LocalInfo(d, options_.rank, state->qp.get(), psn));
  // Flag notifications need the 8-byte record inline (its source is then
  // free at once) and a word for the peer's credits.
  const bool flags = notifies && options_.notify == NotifyMode::kFlag &&
                     state->max_inline >= kNotifyRecordBytes;
  if (flags) {
    ASSIGN_OR_RETURN(state->credit, Allocate(kNotifyRecordBytes));
    local.notify_address = reinterpret_cast<uintptr_t>(state->credit.data());
    ASSIGN_OR_RETURN(local.notify_rkey,
                     UnpackKey(state->credit.descriptor().packed_key,
                               options_.rank));
  }
  QueuePairInfo remote;
  if (options_.use_rdmacm) {
    CmPeerInfo request;
    request.rank = options_.rank;
    request.marker_address = local.marker_address;
    request.marker_rkey = local.marker_rkey;
    request.notify_address = local.notify_address;
    request.notify_rkey = local.notify_rkey;
    CmPeerInfo answer;
    ASSIGN_OR_RETURN(
        state->cm,
        CmConnection::Connect(
            host, port, target, request, job_token_.value,
            options_.connect_timeout,
            [&](rdma_cm_id* id) -> absl::StatusOr<ibv_qp*> {
              // The route must lead out of our own device.
              RETURN_IF_ERROR(CheckCmDevice(id, peer.rank));
              return state->qp.get();
            },
            static_cast<uint8_t>(options_.ack_timeout),
            static_cast<uint8_t>(options_.retry_count),
            static_cast<uint8_t>(
                std::max(1, std::min(16, d.device_attr.max_qp_rd_atom))),
            &answer));
    if (answer.rank != peer.rank) {
      return absl::UnavailableError(absl::StrCat(
          "rdmacm at ", host, ":", port, " was answered by rank ", answer.rank,
          ", not rank ", peer.rank, "; is the published address stale?"));
    }
    remote.rank = answer.rank;
    remote.marker_address = answer.marker_address;
    remote.marker_rkey = answer.marker_rkey;
    remote.notify_address = answer.notify_address;
    remote.notify_rkey = answer.notify_rkey;
    remote.notify_slots = answer.notify_slots;
    remote.qpn = state->cm->remote_qp_num();
  } else {
    const absl::Time deadline = absl::Now() + options_.connect_timeout;
    ASSIGN_OR_RETURN(
        Handshake handshake,
        ExchangeQueuePairInfo(host, port, local, target, job_token_.value,
                              options_.connect_timeout));
    if (handshake.remote.rank != peer.rank) {
      return absl::UnavailableError(absl::StrCat(
          "the handshake at ", host, ":", port, " was answered by rank ",
          handshake.remote.rank, ", not rank ", peer.rank,
          "; is the published address stale?"));
    }
    // On an error from here on, `handshake.connection` closes unconfirmed and
    // the peer frees the queue pair it created for us.
    RETURN_IF_ERROR(ConnectQueuePair(state->qp.get(), d, psn, handshake.remote,
                                     QpOptions()));
    RETURN_IF_ERROR(ConfirmHandshake(
        handshake, std::max(deadline - absl::Now(), absl::Seconds(1))));
    state->connection = std::move(handshake.connection);
    remote = handshake.remote;
  }
  // On an error from here on, the connection closes and the peer frees the
  // queue pair it created for us.
  if (flags && remote.notify_slots != 0) {
    RETURN_IF_ERROR(ValidateNotifyRing(remote.notify_address,
                                       remote.notify_slots, peer.rank));
    state->ring.emplace(reinterpret_cast<const uint64_t*>(state->credit.data()),
                        remote.notify_slots, peer.rank);
  }
  state->remote = remote;
  state->description = absl::StrCat(
      "ibverbs RC QP ", state->qp->qp_num, " -> rank ", peer.rank, " QP ",
      state->remote.qpn, " on ", d.description, ", notify ",
      state->ring.has_value()
          ? absl::StrCat("flag (", state->remote.notify_slots, "-slot ring)")
          : std::string("imm"));
  return state;
}


uint64_t IbverbsTransport::RequestsFor(uint64_t length) const {
  const uint64_t max_message =
      std::max<uint64_t>(context_->device.port_attr.max_msg_sz, kPage);
  if (length <= max_message) return 1;  // Nearly always: no division.
  // Without the rounding addition, which could wrap for a huge length.
  return length / max_message + (length % max_message != 0 ? 1 : 0);
}

absl::Status IbverbsTransport::CheckRingRoom(EndpointState& state) {
  absl::StatusOr<bool> room = state.ring->HasRoom();
  if (!room.ok()) {
    // The peer forged its credit: nothing more goes to it.
    state.failure = room.status();
    Stop(state, room.status()).IgnoreError();
    return room.status();
  }
  if (!*room) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "rank ", state.peer_rank, " has not consumed ",
        state.remote.notify_slots,
        " of our notifications yet (its ring is full); progress the "
        "transport and retry"));
  }
  return absl::OkStatus();
}

bool IbverbsTransport::HasRoom(const EndpointState& state,
                               uint64_t requests) const {
  return state.in_flight.size() + state.reserved + requests + 1 <=
         QpOptions().send_depth;
}

absl::StatusOr<std::optional<NotifyRingWriter::Next>>
IbverbsTransport::ReserveNotification(EndpointState& state, uint32_t value) {
  if (!HasRoom(state, 1)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the send queue towards rank ", state.peer_rank,
        " has no room for a notification; progress the transport and retry"));
  }
  std::optional<NotifyRingWriter::Next> record;
  if (state.ring.has_value()) {
    RETURN_IF_ERROR(CheckRingRoom(state));
    record = state.ring->Take(value);
  }
  ++state.reserved;
  return record;
}

void IbverbsTransport::PostReservedNotification(
    EndpointState& state, uint32_t value,
    std::optional<NotifyRingWriter::Next> record, Completion done) {
  if (state.reserved > 0) --state.reserved;
  absl::Status refused = state.closed ? state.stop_reason : state.failure;
  if (state.closed && refused.ok()) {
    refused = absl::CancelledError(absl::StrCat(
        "the endpoint to rank ", state.peer_rank, " was closed"));
  }
  if (!refused.ok()) {
    completions_.Push(std::move(done), refused);
    return;
  }
  uint64_t bytes = 0;
  ibv_sge sge{};
  ibv_send_wr wr{};
  if (record.has_value()) {
    bytes = record->record;
    sge.addr = reinterpret_cast<uintptr_t>(&bytes);
    sge.length = kNotifyRecordBytes;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_INLINE;
    wr.wr.rdma.remote_addr = state.remote.notify_address +
                             uint64_t{record->slot} * kNotifyRecordBytes;
    wr.wr.rdma.rkey = state.remote.notify_rkey;
  } else {
    // No data: the immediate alone, aimed at the peer's marker region.
    wr.num_sge = 0;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.imm_data = htonl(value);
    wr.wr.rdma.remote_addr = state.remote.marker_address;
    wr.wr.rdma.rkey = state.remote.marker_rkey;
  }
  // A refused post leaves `done` here (PostChain()).
  absl::Status posted = PostChain(state, &wr, 1, std::move(done), true,
                                  "write with notification", false);
  if (!posted.ok()) {
    if (record.has_value()) FailRing(state, posted);
    completions_.Push(std::move(done), posted);
  }
}

void IbverbsTransport::FailRing(EndpointState& state,
                                const absl::Status& why) {
  if (!state.failure.ok()) return;
  // The target delivers records in sequence: one never written would hold
  // back every later one, so nothing more may be notified on this endpoint.
  state.failure = absl::Status(
      why.code(), absl::StrCat("a notification towards rank ",
                               state.peer_rank, " could not be written (",
                               why.message(),
                               "); the endpoint cannot notify any more"));
  Stop(state, state.failure).IgnoreError();
}

absl::Status IbverbsTransport::PostChain(EndpointState& state,
                                         ibv_send_wr* wrs, int count,
                                         Completion&& done, bool has_callback,
                                         const char* op, bool force_signal) {
  if (state.qp == nullptr) {  // Fenced: the queue pair is destroyed.
    return absl::FailedPreconditionError(absl::StrCat(
        "the queue pair towards rank ", state.peer_rank, " was destroyed"));
  }
  const bool was_idle = state.in_flight.empty();
  int run = state.unsignaled_run;
  for (int i = 0; i < count; ++i) {
    const bool last = i + 1 == count;
    const bool signaled = (last && (force_signal || was_idle)) ||
                          run + 1 >= options_.signal_every;
    if (signaled) wrs[i].send_flags |= IBV_SEND_SIGNALED;
    run = signaled ? 0 : run + 1;
    wrs[i].wr_id = (state.id << kSeqBits) | ((state.next_seq + i) & kSeqMask);
    wrs[i].next = last ? nullptr : &wrs[i + 1];
  }
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(state.qp.get(), wrs, &bad);
  // Without an error every request was taken; with one, those before `bad`.
  int posted = count;
  if (rc != 0) {
    posted = 0;
    while (posted < count && &wrs[posted] != bad) ++posted;
  }
  if (posted == 0) {
    if (rc == ENOMEM) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the send queue towards rank ", state.peer_rank,
          " is full; progress the transport and retry"));
    }
    return VerbsError(rc, absl::StrCat("ibv_post_send (", op, ") to rank ",
                                       state.peer_rank));
  }
  for (int i = 0; i < posted; ++i) {
    const bool signaled = (wrs[i].send_flags & IBV_SEND_SIGNALED) != 0;
    state.unsignaled_run = signaled ? 0 : state.unsignaled_run + 1;
    state.tail_unsignaled = !signaled;
    sweep_due_ |= !signaled;
    // Built in place: nothing of it moves on the way in.
    WorkRequest& request = state.in_flight.emplace_back();
    request.seq = state.next_seq++;
    request.op = op;
    // The operation's callback rides on the last request taken: on a
    // partial chain it completes with the failure below.
    if (i + 1 == posted) {
      request.done = std::move(done);
      request.has_callback = has_callback;
      if (has_callback) ++state.operations;
    }
  }
  state.posted_since_progress = true;
  if (posted < count) {
    // The adapter may be reading the source already, so the operation
    // cannot be refused: it is accepted and fails (whatever the adapter says
    // of the requests it took) once they complete or flush.
    absl::Status error = VerbsError(
        rc, absl::StrCat("ibv_post_send (", op, ") to rank ", state.peer_rank,
                         " took ", posted, " of its ", count,
                         " work requests"));
    state.in_flight.back().forced = error;
    if (state.failure.ok()) state.failure = error;
    Stop(state, error).IgnoreError();
  }
  return absl::OkStatus();
}

absl::Status IbverbsTransport::PostOperation(
    EndpointState& state, ibv_wr_opcode opcode,
    std::optional<uint32_t> notification, const ibv_sge& sge, uint64_t length,
    uint64_t remote_address, uint32_t rkey, Completion&& done, const char* op,
    bool host_source) {
  const uint64_t max_message =
      std::max<uint64_t>(context_->device.port_attr.max_msg_sz, kPage);
  const uint64_t chunks = RequestsFor(length);
  const bool flag = notification.has_value() && state.ring.has_value();
  const uint64_t requests = chunks + (flag ? 1 : 0);
  // Room for the requests and a marker behind them.
  if (!HasRoom(state, requests)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the send queue towards rank ", state.peer_rank, " has no room for ",
        requests, " work requests; progress the transport and retry"));
  }
  if (flag) RETURN_IF_ERROR(CheckRingRoom(state));
  absl::InlinedVector<ibv_sge, 2> sges(chunks);
  absl::InlinedVector<ibv_send_wr, 3> wrs(requests);
  for (uint64_t i = 0; i < chunks; ++i) {
    const uint64_t offset = i * max_message;
    ibv_sge& chunk = sges[i];
    chunk = sge;
    chunk.addr += offset;
    chunk.length = static_cast<uint32_t>(std::min(max_message, length - offset));
    ibv_send_wr& wr = wrs[i];
    wr = {};
    wr.sg_list = &chunk;
    wr.num_sge = 1;
    wr.opcode = opcode;
    if (i + 1 == chunks && notification && !flag) {
      wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      wr.imm_data = htonl(*notification);
    }
    wr.wr.rdma.remote_addr = remote_address + offset;
    wr.wr.rdma.rkey = rkey;
    // Inline data is copied at post time: the source is free at once.
    if (opcode == IBV_WR_RDMA_WRITE && host_source &&
        chunk.length <= state.max_inline) {
      wr.send_flags |= IBV_SEND_INLINE;
    }
  }
  // The flag record: inline, so its source (this stack) is free at once.
  uint64_t record = 0;
  ibv_sge record_sge{};
  if (flag) {
    const NotifyRingWriter::Next next = state.ring->Take(*notification);
    record = next.record;
    record_sge.addr = reinterpret_cast<uintptr_t>(&record);
    record_sge.length = kNotifyRecordBytes;
    ibv_send_wr& wr = wrs[chunks];
    wr = {};
    wr.sg_list = &record_sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_INLINE;
    wr.wr.rdma.remote_addr =
        state.remote.notify_address + uint64_t{next.slot} * kNotifyRecordBytes;
    wr.wr.rdma.rkey = state.remote.notify_rkey;
  }
  absl::Status posted = PostChain(state, wrs.data(),
                                  static_cast<int>(requests), std::move(done),
                                  true, op, false);
  // Nothing was taken: the record's number goes to the next one.
  if (!posted.ok() && flag) state.ring->Untake();
  return posted;
}

absl::Status IbverbsTransport::PostMarker(EndpointState& state,
                                          Completion&& done,
                                          bool has_callback) {
  ibv_sge sge{};
  // The scratch half of our marker region receives the bytes.
  sge.addr = reinterpret_cast<uintptr_t>(marker_.data()) + 64;
  sge.length = kMarkerBytes;
  sge.lkey = static_cast<VerbsRegistration*>(marker_.registration())->lkey();
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_READ;
  wr.wr.rdma.remote_addr = state.remote.marker_address;
  wr.wr.rdma.rkey = state.remote.marker_rkey;
  return PostChain(state, &wr, 1, std::move(done), has_callback,
                   has_callback ? "flush" : "completion marker", true);
}

void IbverbsTransport::Complete(EndpointState& state, WorkRequest& request,
                                absl::Status status) {
  if (!request.has_callback) return;
  --state.operations;
  if (!request.forced.ok()) status = request.forced;
  completions_.Push(std::move(request.done), std::move(status));
}

void IbverbsTransport::FailAll(EndpointState& state,
                               const absl::Status& status) {
  while (!state.in_flight.empty()) {
    Complete(state, state.in_flight.front(), status);
    state.in_flight.pop_front();
  }
  state.tail_unsignaled = false;
}

void IbverbsTransport::HandleSendCompletion(const ibv_wc& wc) {
  auto it = endpoints_.find(wc.wr_id >> kSeqBits);
  if (it == endpoints_.end()) return;  // Its endpoint is gone.
  EndpointState& state = *it->second;
  const uint64_t seq = wc.wr_id & kSeqMask;
  // Everything posted before `seq` completed successfully: a send queue
  // completes in order, and a failed or flushed request always produces a
  // completion, signaled or not.
  while (!state.in_flight.empty() && state.in_flight.front().seq < seq) {
    Complete(state, state.in_flight.front(), absl::OkStatus());
    state.in_flight.pop_front();
  }
  if (state.in_flight.empty() || state.in_flight.front().seq != seq) return;
  // Completed where it lies (Complete() only queues the callback), then
  // dropped.
  WorkRequest& request = state.in_flight.front();
  if (wc.status == IBV_WC_SUCCESS) {
    Complete(state, request, absl::OkStatus());
    state.in_flight.pop_front();
    if (state.in_flight.empty()) state.tail_unsignaled = false;
    return;
  }
  // Flushed after a stop; or anything unfinished on a closed endpoint, which
  // is cancelled whatever the adapter says about it.
  if (state.stopped &&
      (wc.status == IBV_WC_WR_FLUSH_ERR || state.closed)) {
    Complete(state, request, state.stop_reason);
    state.in_flight.pop_front();
    return;
  }
  absl::Status error = WorkCompletionError(wc.status, state.peer_rank,
                                           request.op);
  if (state.failure.ok()) state.failure = error;
  Complete(state, request, error);
  state.in_flight.pop_front();
  if (!state.stopped) {
    // The adapter moved the queue pair to the error state: every request
    // still queued ends with a flush completion, which completes it with
    // this failure once the adapter is done with its buffers.
    state.stopped = true;
    state.stop_reason = state.failure;
    state.drain_deadline = absl::Now() + options_.close_timeout;
    state.tail_unsignaled = false;
  }
}

absl::StatusOr<int> IbverbsTransport::PollSendQueue() {
  ibv_wc wc[kPollBatch];
  const int n = ibv_poll_cq(send_cq_.get(), kPollBatch, wc);
  if (n < 0) return absl::InternalError("ibv_poll_cq (send) failed");
  for (int i = 0; i < n; ++i) HandleSendCompletion(wc[i]);
  return n;
}

void IbverbsTransport::TakeListenerChanges(
    std::vector<std::pair<uint32_t, QpPtr>>& retiring) {
  if (!listener_changed_.load(std::memory_order_acquire)) return;
  absl::MutexLock lock(&mutex_);
  listener_changed_.store(false, std::memory_order_relaxed);
  retiring.swap(retired_);
  ranks_ = rank_of_qp_;
  for (auto& ring : new_rings_) rings_.push_back(std::move(ring));
  new_rings_.clear();
}

int IbverbsTransport::PollRings() {
  int delivered = 0;
  for (auto& ring : rings_) {
    delivered += ring->reader->Poll([&](uint32_t value) {
      notifications_.Push({ring->rank, value});
    });
    if (std::optional<uint64_t> due = ring->reader->CreditDue()) {
      // Not marked sent when the post fails: the next poll tries again.
      if (SendCredit(*ring, *due)) ring->reader->CreditSent(*due);
    }
  }
  return delivered;
}

bool IbverbsTransport::SendCredit(AcceptedRing& ring, uint64_t consumed) {
  // The source word behind the records, for queue pairs without inline
  // data; a later credit may overwrite it before the adapter reads it,
  // which only sends a newer count.
  uint64_t* source = reinterpret_cast<uint64_t*>(
      ring.memory.data() + size_t{options_.notify_slots} * kNotifyRecordBytes);
  *source = consumed;
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(source);
  sge.length = kNotifyRecordBytes;
  sge.lkey =
      static_cast<VerbsRegistration*>(ring.memory.registration())->lkey();
  ibv_send_wr wr{};
  wr.wr_id = 0;  // No endpoint has id 0: its completion is ignored.
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (ring.max_inline >= kNotifyRecordBytes) {
    wr.send_flags |= IBV_SEND_INLINE;
  }
  wr.wr.rdma.remote_addr = ring.credit_address;
  wr.wr.rdma.rkey = ring.credit_rkey;
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(ring.qp, &wr, &bad); rc != 0) {
    // The peer's queue pair is failing or gone: it sends nothing more.
    std::fprintf(stderr,
                 "rdmaflow ibverbs: rank %d cannot return notification "
                 "credits to rank %d: %s\n",
                 options_.rank, ring.rank, std::strerror(rc));
    return false;
  }
  return true;
}

absl::StatusOr<int> IbverbsTransport::PollReceiveQueue() {
  ibv_wc wc[kPollBatch];
  int n = 0;
  int received = 0;
  while ((n = ibv_poll_cq(recv_cq_.get(), kPollBatch, wc)) > 0) {
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) continue;
      if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        auto found = ranks_.find(wc[i].qp_num);
        if (found == ranks_.end()) {
          // Accepted since TakeListenerChanges(): refresh the copy.
          absl::MutexLock lock(&mutex_);
          ranks_ = rank_of_qp_;
          found = ranks_.find(wc[i].qp_num);
        }
        const int rank = found == ranks_.end() ? -1 : found->second;
        if (rank < 0) {
          notifications_.CountMalformed(absl::StrCat(
              "on queue pair ", wc[i].qp_num, ", which belongs to no connected peer"));
          continue;
        }
        notifications_.Push({rank, ntohl(wc[i].imm_data)});
      }
    }
    received += n;
    if (n < kPollBatch) break;  // Drained.
  }
  if (n < 0) return absl::InternalError("ibv_poll_cq (receive) failed");
  return received;
}

absl::StatusOr<int> IbverbsTransport::Progress() {
  // Taken before the receive queue and the rings are drained: what the
  // retiring queue pairs delivered is there already (see RetireAccepted).
  std::vector<std::pair<uint32_t, QpPtr>> retiring;
  TakeListenerChanges(retiring);
  // Should a poll fail below, the retired queue pairs still go with their
  // rings: a ring left behind would return credits on a destroyed one.
  absl::Cleanup drop_retired = [&] {
    if (!retiring.empty()) DropRetired(retiring);
  };
  // Again only while a poll came back full.
  while (true) {
    ASSIGN_OR_RETURN(int n, PollSendQueue());
    if (n < kPollBatch) break;
  }
  ASSIGN_OR_RETURN(const int received, PollReceiveQueue());
  unposted_receives_ += received;
  if (unposted_receives_ >= repost_batch_) {
    RETURN_IF_ERROR(PostReceives(unposted_receives_));
  }
  const int flagged = rings_.empty() ? 0 : PollRings();
  // Their rings were polled a last time above (the queue pairs are in the
  // error state: nothing more lands); then the rings and queue pairs go.
  if (!retiring.empty()) DropRetired(retiring);
  WatchPeers();
  if (sweep_due_) SweepIdleTails();
  return completions_.FireAll() + received + flagged;
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
  absl::StatusOr<int> sent = PollSendQueue();
  absl::StatusOr<int> received = PollReceiveQueue();
  if (received.ok()) unposted_receives_ += *received;
  const int flagged = rings_.empty() ? 0 : PollRings();
  if (!sent.ok() || !received.ok() || *sent > 0 || *received > 0 ||
      flagged > 0 || !notifications_.empty() || !completions_.empty()) {
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
  return notifications_.Pop();
}

void IbverbsTransport::DropRetired(
    std::vector<std::pair<uint32_t, QpPtr>>& retiring) {
  {
    absl::MutexLock lock(&mutex_);
    for (const auto& [qpn, qp] : retiring) {
      rank_of_qp_.erase(qpn);
      ranks_.erase(qpn);
    }
    retired_count_ += retiring.size();
  }
  for (const auto& [qpn, qp] : retiring) {
    rings_.erase(std::remove_if(rings_.begin(), rings_.end(),
                                [qpn = qpn](const auto& ring) {
                                  return ring->qpn == qpn;
                                }),
                 rings_.end());
  }
  retiring.clear();  // Destroys them.
}

void IbverbsTransport::SweepIdleTails() {
  // Endpoints left idle (nothing posted since the last Progress()) with an
  // unsignaled tail get a signaled marker behind it; those still posting
  // are looked at again next time. An endpoint whose flag is stale here
  // (posted since, but with a signaled tail) only needs it cleared.
  sweep_due_ = false;
  for (auto& [id, state] : endpoints_) {
    if (state->tail_unsignaled && !state->posted_since_progress &&
        !state->stopped) {
      PostMarker(*state, nullptr, false).IgnoreError();
    }
    state->posted_since_progress = false;
    // A marker refused (a full queue) leaves the tail unsignaled: retried.
    if (state->tail_unsignaled && !state->stopped) sweep_due_ = true;
  }
}

void IbverbsTransport::WatchPeers() {
  // A poll() per endpoint is cheap, but not on every Progress() call; nor
  // is a precise clock read everywhere (CoarseNow()).
  const absl::Time now = CoarseNow();
  if (now < next_watch_) return;
  next_watch_ = now + absl::Milliseconds(50);
  for (auto& [id, state] : endpoints_) {
    if (state->stopped) {
      if (!state->in_flight.empty() && now >= state->drain_deadline) {
        Fence(*state).IgnoreError();  // Logged.
      }
      continue;
    }
    if (state->cm != nullptr ? !state->cm->Disconnected()
                             : !PeerClosed(state->connection.get())) {
      continue;
    }
    state->failure = absl::UnavailableError(absl::StrCat(
        "rank ", state->peer_rank,
        " is gone: its connection closed (the process exited or was killed)"));
    // What is in flight fails with it as the flush completions arrive.
    Stop(*state, state->failure).IgnoreError();
  }
}

absl::Status IbverbsTransport::Stop(EndpointState& state,
                                    absl::Status reason) {
  if (state.stopped) return absl::OkStatus();
  // A request that completed unsignaled leaves no completion, so the last
  // request must be signaled for its completion to prove the adapter done.
  // Post() always keeps room for this marker.
  absl::Status marker = absl::OkStatus();
  if (state.tail_unsignaled && !state.in_flight.empty()) {
    marker = PostMarker(state, nullptr, false);
  }
  absl::Status stopped = StopQueuePair(state.qp.get());
  state.stopped = true;
  state.stop_reason = std::move(reason);
  state.drain_deadline = absl::Now() + options_.close_timeout;
  state.tail_unsignaled = false;
  // Without the marker or the error state the flush may not come: Fence()
  // at the deadline covers it.
  if (!marker.ok()) return marker;
  return stopped;
}

absl::Status IbverbsTransport::CloseEndpoint(EndpointState& state) {
  absl::Status stopped =
      Stop(state, absl::CancelledError(absl::StrCat(
                      "the endpoint to rank ", state.peer_rank,
                      " was closed")));
  // The flush takes microseconds on a NIC and longer on an emulated one:
  // spin, then yield, then sleep briefly between polls.
  int idle = 0;
  while (!state.in_flight.empty()) {
    absl::StatusOr<int> polled = PollSendQueue();
    if (!polled.ok()) {
      absl::Status fenced = Fence(state);
      return fenced.ok() ? polled.status() : fenced;
    }
    if (*polled > 0) {
      idle = 0;
      continue;
    }
    if (absl::Now() >= state.drain_deadline) {
      absl::Status fenced = Fence(state);
      return fenced.ok() ? stopped : fenced;
    }
    ++idle;
    if (idle > 256) {
      absl::SleepFor(absl::Microseconds(200));
    } else if (idle > 32) {
      std::this_thread::yield();
    }
  }
  return stopped;
}

absl::Status IbverbsTransport::Fence(EndpointState& state) {
  ++fenced_count_;
  const size_t left = state.in_flight.size();
  ibv_qp* qp = state.qp.release();
  const int rc = qp == nullptr ? 0 : ibv_destroy_qp(qp);
  if (rc == 0) {
    std::fprintf(stderr,
                 "rdmaflow ibverbs: %zu work requests towards rank %d had no "
                 "completion %s after their queue pair was stopped; destroyed "
                 "the queue pair, so the adapter no longer touches their "
                 "buffers\n",
                 left, state.peer_rank,
                 absl::FormatDuration(options_.close_timeout).c_str());
    FailAll(state, state.stop_reason);
    return absl::OkStatus();
  }
  // The adapter may still write into these buffers: never run the callbacks
  // (they hand the buffers back) nor destroy what they captured. Leaked on
  // purpose.
  auto* leaked = new std::deque<WorkRequest>(std::move(state.in_flight));
  state.in_flight.clear();
  state.operations = 0;
  const std::string message = absl::StrCat(
      "cannot destroy the queue pair towards rank ", state.peer_rank, " (",
      std::strerror(rc), ") after it did not flush: leaking it and the ",
      leaked->size(),
      " operations still in flight, whose buffers the adapter may still "
      "write; do not free or reuse them");
  std::fprintf(stderr, "rdmaflow ibverbs: %s\n", message.c_str());
  return absl::InternalError(message);
}

void IbverbsTransport::Forget(uint64_t endpoint_id) {
  endpoints_.erase(endpoint_id);
}

absl::Status RegisterIbverbsTransport(TransportRegistry& registry) {
  return registry.Register(
      kBackend, /*priority=*/50,
      [](const TransportConfig& config)
          -> absl::StatusOr<std::unique_ptr<Transport>> {
        RETURN_IF_ERROR(CheckKnownParams(
            config, kBackend,
            {"device", "port", "gid_index", "bootstrap_host", "bind_address",
             "world_size", "max_outstanding", "signal_every", "max_inline",
             "ack_timeout", "retry_count", "notify", "notify_slots",
             "events", "qps_per_peer", "stripe_min", "connect",
             "max_endpoints_per_peer"}));
        IbverbsTransportOptions options;
        options.rank = config.rank;
        for (const auto& [key, value] : config.params) {
          bool ok = true;
          int64_t number = 0;
          if (key == "device") {
            options.device.device = value;
          } else if (key == "bootstrap_host") {
            options.bootstrap_host = value;
          } else if (key == "bind_address") {
            options.bind_address = value;
          } else if (key == "connect") {
            if (value != "tcp" && value != "rdmacm") {
              return absl::InvalidArgumentError(absl::StrCat(
                  "ibverbs parameter connect='", value,
                  "' must be tcp (rdmaflow's handshake) or rdmacm (the RDMA "
                  "connection manager)"));
            }
            options.use_rdmacm = value == "rdmacm";
          } else if (key == "notify") {
            if (value != "flag" && value != "imm") {
              return absl::InvalidArgumentError(absl::StrCat(
                  "ibverbs parameter notify='", value,
                  "' must be flag (a record written behind the data) or imm "
                  "(write with immediate)"));
            }
            options.notify = value == "flag" ? NotifyMode::kFlag
                                             : NotifyMode::kImmediate;
          } else {
            ok = absl::SimpleAtoi(value, &number) && number >= 0;
            // Into its option's type only when it fits there: never
            // narrowed silently (a port of 2^32 + 1 is not port 1).
            auto set = [&](auto& field) {
              using Field = std::remove_reference_t<decltype(field)>;
              ok = ok && static_cast<uint64_t>(number) <=
                             static_cast<uint64_t>(std::numeric_limits<Field>::max());
              if (ok) field = static_cast<Field>(number);
            };
            if (key == "port") set(options.device.port);
            if (key == "world_size") set(options.world_size);
            if (key == "gid_index") set(options.device.gid_index);
            if (key == "max_outstanding") set(options.max_outstanding_per_endpoint);
            if (key == "signal_every") set(options.signal_every);
            if (key == "max_inline") {
              ok = ok && number <= 4096;
              options.max_inline = static_cast<uint32_t>(number);
            }
            if (key == "qps_per_peer") {
              ok = ok && number >= 1 && number <= kMaxQueuePairsPerPeer;
              options.qps_per_peer = static_cast<int>(number);
            }
            if (key == "stripe_min") {
              ok = ok && number >= 4096;
              options.stripe_min = static_cast<uint64_t>(number);
            }
            if (key == "events") {
              ok = ok && number <= 1;
              options.completion_events = number == 1;
            }
            if (key == "notify_slots") {
              ok = ok && number <= kMaxNotifySlots;
              options.notify_slots = static_cast<uint32_t>(number);
            }
            if (key == "ack_timeout") set(options.ack_timeout);
            if (key == "retry_count") set(options.retry_count);
            if (key == "max_endpoints_per_peer") {
              set(options.max_endpoints_per_peer);
              ok = ok && number >= 1;
            }
          }
          if (!ok) {
            return absl::InvalidArgumentError(absl::StrCat(
                "ibverbs parameter ", key, "='", value,
                "' must be a non-negative integer that fits its option (an int "
                "for most; max_inline at most 4096, "
                "notify_slots at most ", kMaxNotifySlots, ", qps_per_peer 1..",
                kMaxQueuePairsPerPeer, ", stripe_min at least 4096, events 0 "
                "or 1)"));
          }
        }
        return IbverbsTransport::Create(options);
      },
      ProbeIbverbs);
}

}  // namespace rdmaflow::rdma::ibverbs
