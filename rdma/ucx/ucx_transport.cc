#include "rdma/ucx/ucx_transport.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/coarse_clock.h"
#include "common/status_macros.h"
#include "rdma/ucx/envelope.h"
#include "rdma/ucx/ep_lanes.h"
#include "rdma/ucx/flag_inbox.h"
#include "rdma/ucx/net_devices.h"
#include "rdma/ucx/peer_liveness.h"
#include "rdma/ucx/ucx_endpoint.h"
#include "rdma/ucx/ucx_internal.h"
#include "rdma/ucx/ucx_probe.h"
#include "rdma/ucx/ucx_status.h"

namespace rdmaflow::rdma::ucx {
namespace {

constexpr char kBackend[] = "ucx";
// How long a transport's destruction waits for its endpoints' closes and
// set-up messages, which may need the peers' progress.
constexpr absl::Duration kTeardownTimeout = absl::Seconds(2);
constexpr absl::Duration kTeardownCheckInterval = absl::Milliseconds(50);
ucs_status_t OnNotification(void* arg, const void* /*header*/,
                            size_t /*header_length*/, void* data,
                            size_t length, const ucp_am_recv_param_t* param) {
  auto* queue = static_cast<internal::NotificationQueue*>(arg);
  uint32_t payload[2];
  if (length != sizeof(payload) ||
      (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
    queue->CountMalformed(absl::StrCat(length, " bytes"));
    return UCS_OK;
  }
  std::memcpy(payload, data, sizeof(payload));
  // UCX active messages do not say who sent them: the sender's rank is the
  // one it claims (docs/security.md). At least it must be a rank.
  if (payload[0] > static_cast<uint32_t>(std::numeric_limits<int>::max())) {
    queue->CountMalformed(absl::StrCat("claiming rank ", payload[0]));
    return UCS_OK;
  }
  queue->Push(Notification{static_cast<int>(payload[0]), payload[1]});
  return UCS_OK;
}

// Whether UCX's transports `tls` (its TLS setting; empty: its default,
// which has them) include shared memory, the only memory ucp_rkey_ptr maps.
bool MapsPeerMemory(const std::string& tls) {
  if (tls.empty()) return true;
  const TlsList list = ParseTls(tls);
  if (list.all_but) {
    // "^a,b": every transport but a and b. Shared memory is gone only when
    // the list takes all of it, not one kind (say "^xpmem").
    if (list.Names("shm") || list.Names("sm") || list.Names("mm") || list.Names("all")) {
      return false;
    }
    return !(list.Names("posix") && list.Names("sysv") && list.Names("xpmem"));
  }
  for (const char* name : {"all", "shm", "sm", "mm", "posix", "sysv", "xpmem"}) {
    if (list.Names(name)) return true;
  }
  return false;
}

void OnEndpointError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* state = static_cast<UcxEndpointState*>(arg);
  if (!state->failure.ok()) return;
  state->failure = absl::UnavailableError(absl::StrCat(
      "peer rank ", state->peer_rank, " failed (UCX: ",
      ucs_status_string(status),
      "); is the process still alive and reachable?"));
}

}  // namespace

UcxRegistration::~UcxRegistration() {
  ucs_status_t status = ucp_mem_unmap(context->context, memh);
  if (status != UCS_OK) {
    std::fprintf(stderr, "rdmaflow: ucp_mem_unmap failed: %s\n",
                 ucs_status_string(status));
  }
}

UcxTransport::UcxTransport(const UcxTransportOptions& options,
                           std::shared_ptr<UcxContext> context)
    : options_(options),
      context_(std::move(context)),
      notifications_(absl::StrCat("rdmaflow ucx rank ", options.rank),
                     options.max_queued_notifications),
      shared_(std::make_unique<UcxWorkerState>()) {}

absl::StatusOr<std::unique_ptr<UcxTransport>> UcxTransport::Create(
    const UcxTransportOptions& options) {
  if (options.rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("UCX transport rank must be >= 0, got ", options.rank));
  }
  if (options.max_outstanding_per_endpoint == 0) {
    return absl::InvalidArgumentError(
        "UCX max_outstanding_per_endpoint must be > 0");
  }
  if (absl::StrContains(options.net_devices, ",,") ||
      absl::StartsWith(options.net_devices, ",") ||
      absl::EndsWith(options.net_devices, ",") ||
      options.net_devices.find_first_of(" \t\n") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "UCX net_devices='", options.net_devices,
        "' must be a comma-separated list of device names, e.g. eth0 or "
        "mlx5_0:1,eth0"));
  }
  // NET_DEVICES: the option, else UCX_NET_DEVICES (which ucp_config_read
  // reads), else TCP on loopback only (net_devices.h).
  std::string net_devices = options.net_devices;
  std::string net_devices_in_effect = net_devices;
  bool tcp_on_loopback_by_default = false;
  if (net_devices.empty()) {
    if (const char* env = std::getenv("UCX_NET_DEVICES")) {
      net_devices_in_effect = absl::StrCat("UCX_NET_DEVICES=", env);
    } else {
      net_devices = DefaultNetDevices();
      net_devices_in_effect = net_devices;
      tcp_on_loopback_by_default = true;
    }
  }
  ucp_config_t* config = nullptr;
  RETURN_IF_ERROR(
      UcsToStatus(ucp_config_read(nullptr, nullptr, &config),
                  "reading the UCX configuration"));
  absl::Status status;
  if (!options.tls.empty()) {
    status = UcsToStatus(ucp_config_modify(config, "TLS", options.tls.c_str()),
                         absl::StrCat("setting UCX TLS=", options.tls));
  }
  if (status.ok() && !net_devices.empty()) {
    status = UcsToStatus(
        ucp_config_modify(config, "NET_DEVICES", net_devices.c_str()),
        absl::StrCat("setting UCX NET_DEVICES=", net_devices));
  }
  const std::string keepalive =
      absl::StrCat(absl::ToInt64Microseconds(options.keepalive_interval), "us");
  if (status.ok()) {
    status = UcsToStatus(
        ucp_config_modify(config, "KEEPALIVE_INTERVAL", keepalive.c_str()),
        "setting UCX KEEPALIVE_INTERVAL");
  }
  if (status.ok() && (options.tcp_tx_seg_kb < 0 || options.tcp_tx_seg_kb > 64)) {
    status = absl::InvalidArgumentError(absl::StrCat(
        "UCX tcp_tx_seg_kb=", options.tcp_tx_seg_kb,
        " must be between 1 and 64 KiB, as TCP's receive segment (64 KiB) must hold it "
        "(0: UCX's own, 8 KiB; UCX_TCP_TX_SEG_SIZE and UCX_TCP_RX_SEG_SIZE set both)"));
  }
  // UCX_TCP_TX_SEG_SIZE in the environment wins, as UCX_NET_DEVICES does,
  // and so does UCX_TCP_RX_SEG_SIZE (UCX refuses a send segment larger
  // than the receive one). ucp_config_modify keeps a name it does not know
  // for the transports' own tables, which name their fields without their
  // prefix ("TCP_"): in UCX 1.13 only TCP's has a TX_SEG_SIZE. Only where
  // TCP may run: UCX warns of a setting no transport took.
  const char* tls_env = std::getenv("UCX_TLS");
  const char* devices_env = std::getenv("UCX_NET_DEVICES");
  const bool may_use_tcp = MayUseTcp(
      !options.tls.empty() ? options.tls : tls_env != nullptr ? tls_env : "",
      !net_devices.empty() ? net_devices : devices_env != nullptr ? devices_env : "");
  std::string tcp_tx_seg_in_effect;  // set by us; empty: UCX's or the environment's
  if (status.ok() && may_use_tcp && options.tcp_tx_seg_kb > 0 &&
      std::getenv("UCX_TCP_TX_SEG_SIZE") == nullptr &&
      std::getenv("UCX_TCP_RX_SEG_SIZE") == nullptr) {
    const std::string seg = absl::StrCat(options.tcp_tx_seg_kb, "K");
    tcp_tx_seg_in_effect = seg;
    status = UcsToStatus(ucp_config_modify(config, "TX_SEG_SIZE", seg.c_str()),
                         absl::StrCat("setting UCX TCP_TX_SEG_SIZE=", seg));
  }
  // Over TCP alone every operation progresses through a socket, which the
  // worker's event file descriptor announces: a waiting loop can sleep on
  // it instead of polling (WaitForActivity).
  const bool wakeup = OnlyTcp(!options.tls.empty() ? options.tls
                              : tls_env != nullptr  ? tls_env
                                                    : "");
  auto context = std::make_shared<UcxContext>();
  if (status.ok()) {
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM;
    if (wakeup) params.features |= UCP_FEATURE_WAKEUP;
    status = UcsToStatus(
        ucp_init(&params, config, &context->context),
        absl::StrCat("initializing UCX (TLS=",
                     options.tls.empty() ? "default" : options.tls,
                     ", NET_DEVICES=", net_devices_in_effect,
                     "; the `tls` and `net_devices` parameters) for rank ",
                     options.rank));
    if (!status.ok()) context->context = nullptr;
  }
  ucp_config_release(config);
  RETURN_IF_ERROR(status);

  std::unique_ptr<UcxTransport> transport(
      new UcxTransport(options, std::move(context)));
  transport->net_devices_ = net_devices_in_effect;
  transport->tcp_tx_seg_ = tcp_tx_seg_in_effect;
  transport->tcp_on_loopback_by_default_ = tcp_on_loopback_by_default;
  transport->shared_->context = transport->context_->context;
  transport->shared_->rank = options.rank;
  transport->shared_->max_outstanding_per_endpoint = options.max_outstanding_per_endpoint;
  transport->shared_->streaming_copy_min = options.streaming_copy_min;
  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  RETURN_IF_ERROR(UcsToStatus(
      ucp_worker_create(transport->context_->context, &worker_params,
                        &transport->shared_->worker),
      "creating the UCX worker"));
  if (wakeup) {
    int fd = -1;
    RETURN_IF_ERROR(UcsToStatus(ucp_worker_get_efd(transport->shared_->worker, &fd),
                                "getting the UCX worker's event file descriptor"));
    transport->event_fd_ = fd;
  }

  ucp_am_handler_param_t handler{};
  handler.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                       UCP_AM_HANDLER_PARAM_FIELD_CB |
                       UCP_AM_HANDLER_PARAM_FIELD_ARG;
  handler.id = kNotificationAmId;
  handler.cb = &OnNotification;
  handler.arg = &transport->notifications_;
  RETURN_IF_ERROR(UcsToStatus(
      ucp_worker_set_am_recv_handler(transport->shared_->worker, &handler),
      "registering the UCX notification handler"));

  // The flag inbox, where peers could map it.
  std::optional<FlagInboxAddress> inbox;
  if (options.flag_notifications && MapsPeerMemory(options.tls)) {
    const FlagInboxLayout layout;
    ASSIGN_OR_RETURN(MemoryRegion region,
                     transport->Allocate(layout.TotalBytes()));
    ASSIGN_OR_RETURN(std::string key, UnwrapRkey(region.descriptor().packed_key));
    inbox = FlagInboxAddress{region.descriptor().address, region.size(),
                             layout.lanes, layout.slots, std::move(key)};
    transport->inbox_reader_ =
        std::make_unique<FlagInboxReader>(region.data(), layout);
    transport->inbox_.emplace(std::move(region));
  }

  ucp_address_t* address = nullptr;
  size_t address_length = 0;
  RETURN_IF_ERROR(UcsToStatus(
      ucp_worker_get_address(transport->shared_->worker, &address, &address_length),
      "getting the UCX worker address"));
  // The address carries our process identity, for same-host liveness checks.
  transport->self_ = std::make_unique<ProcessIdentity>(SelfIdentity());
  transport->address_ =
      WrapWorkerAddress(*transport->self_, address, address_length, inbox);
  ucp_worker_release_address(transport->shared_->worker, address);
  return transport;
}

UcxTransport::~UcxTransport() {
  if (shared_->worker == nullptr) {
    shared_->completions.FireAll();
    return;
  }
  // Never tear down an endpoint whose set-up is in flight: UCX 1.13 (built
  // with assertions, as Debian's is) aborts when it purges a queued wire-up
  // request or reply ("ucp_request.c:684 ... got REQ message", fixed in UCX
  // 1.14), whether in ucp_worker_destroy or when the connection fails. So
  // first let the graceful endpoint closes finish (they flush the wire-up
  // too), then the worker's own endpoints (e.g. a wire-up reply to a peer
  // that connected to us). Closes towards peers known to be dead cannot
  // finish (a shared-memory FIFO nobody drains) and are not waited for;
  // UCX discards what they hold (data, flushes) when the worker goes.
  auto waiting = [this] {
    return std::any_of(shared_->closing.begin(), shared_->closing.end(),
                       [](const UcxWorkerState::Closing& c) { return c.state->failure.ok(); });
  };
  const absl::Time deadline = absl::Now() + kTeardownTimeout;
  absl::Time next_check = absl::InfinitePast();
  while (waiting() && absl::Now() < deadline) {
    ucp_worker_progress(shared_->worker);
    PollClosing();
    if (absl::Now() >= next_check) {
      // A watched peer that exits meanwhile (e.g. at the end of a job) will
      // never drain its shared-memory FIFO: stop waiting for it.
      next_check = absl::Now() + kTeardownCheckInterval;
      for (UcxWorkerState::Closing& closing : shared_->closing) {
        UcxEndpointState& state = *closing.state;
        if (state.watched && state.failure.ok() &&
            IsProcessGone(state.peer_identity)) {
          state.failure = absl::UnavailableError(absl::StrCat(
              "peer rank ", state.peer_rank, " exited while closing"));
        }
      }
    }
  }
  bool settled = !waiting();
  if (settled && shared_->closing.empty()) {
    ucp_request_param_t param{};
    ucs_status_ptr_t request = ucp_worker_flush_nbx(shared_->worker, &param);
    if (UCS_PTR_IS_PTR(request)) {
      while (ucp_request_check_status(request) == UCS_INPROGRESS &&
             absl::Now() < deadline) {
        ucp_worker_progress(shared_->worker);
      }
      settled = ucp_request_check_status(request) != UCS_INPROGRESS;
      ucp_request_free(request);
    }
  }
  if (!settled) {
    // A peer that neither progresses nor has died (e.g. a transport of this
    // process that nobody drives). Leave the worker and its context
    // undestroyed rather than abort inside UCX; fail what is still owed a
    // callback.
    std::fprintf(stderr,
                 "rdmaflow: rank %d: UCX endpoints still closing or setting "
                 "up after %s (is a peer not progressing?); leaving this "
                 "transport's UCX worker undestroyed, since UCX 1.13 aborts "
                 "when it discards an endpoint set-up in flight\n",
                 options_.rank, absl::FormatDuration(kTeardownTimeout).c_str());
    for (UcxWorkerState::Closing& closing : shared_->closing) {
      UcxOps::AbandonInFlight(*closing.state);
      // What waited behind those (queued notifications and flushes) ends
      // too: each completion fires exactly once.
      UcxOps::PumpSequence(*closing.state);
    }
    shared_->completions.FireAll();
    // Deliberately leaked: ucp_cleanup must not run while the worker exists.
    new std::shared_ptr<UcxContext>(context_);
    return;
  }
  // Closes towards dead peers: released, so that the worker's destruction,
  // which purges what UCX still holds, frees them.
  for (UcxWorkerState::Closing& closing : shared_->closing) {
    UcxOps::AbandonInFlight(*closing.state);
    UcxOps::PumpSequence(*closing.state);
    ucp_request_free(closing.request);
    UcxOps::DestroyRemoteKeys(*closing.state);
  }
  shared_->completions.FireAll();
  ucp_worker_destroy(shared_->worker);
}


Capabilities UcxTransport::capabilities() const {
  return Capabilities{
      kBackend,
      absl::StrCat("UCX ", ucp_get_version_string(),
                   ", TLS=", options_.tls.empty() ? "default" : options_.tls,
                   ", NET_DEVICES=", net_devices_,
                   tcp_tx_seg_.empty() ? "" : absl::StrCat(", TCP_TX_SEG_SIZE=", tcp_tx_seg_),
                   !MapsPeerMemory(options_.tls)      ? ""
                   : options_.streaming_copy_min == 0 || !StreamingCopyAvailable()
                       ? ", plain copies to same-host peers"
                       : absl::StrCat(", streaming copies to same-host peers from ",
                                      options_.streaming_copy_min % 1024 == 0
                                          ? absl::StrCat(options_.streaming_copy_min / 1024,
                                                         " KiB")
                                          : absl::StrCat(options_.streaming_copy_min,
                                                         " bytes"))),
      /*one_sided_allocate=*/true, options_.max_outstanding_per_endpoint,
      MapsPeerMemory(options_.tls), /*flag_writes=*/true};
}

absl::StatusOr<MemoryRegion> UcxTransport::Map(void* address, size_t bytes,
                                               bool allocate) {
  if (bytes == 0) {
    return absl::InvalidArgumentError(
        allocate ? "cannot allocate a 0-byte region"
                 : "cannot register an empty span");
  }
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                      UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  params.address = address;
  params.length = bytes;
  params.flags = allocate ? UCP_MEM_MAP_ALLOCATE : 0;
  ucp_mem_h memh = nullptr;
  RETURN_IF_ERROR(UcsToStatus(
      ucp_mem_map(context_->context, &params, &memh),
      absl::StrCat("rank ", options_.rank, " mapping ", bytes,
                   " bytes with ucp_mem_map")));
  auto registration = std::make_unique<UcxRegistration>(context_, memh);

  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  RETURN_IF_ERROR(UcsToStatus(ucp_mem_query(memh, &attr),
                              "querying a UCX memory mapping"));
  if (attr.length < bytes) {
    return absl::InternalError(absl::StrCat(
        "ucp_mem_map returned ", attr.length, " bytes for ", bytes));
  }
  void* rkey_buffer = nullptr;
  size_t rkey_size = 0;
  RETURN_IF_ERROR(UcsToStatus(
      ucp_rkey_pack(context_->context, memh, &rkey_buffer, &rkey_size),
      "packing a UCX remote key"));
  std::string packed = WrapRkey(rkey_buffer, rkey_size);
  ucp_rkey_buffer_release(rkey_buffer);

  auto* data = static_cast<std::byte*>(attr.address);
  if (allocate) std::memset(data, 0, bytes);
  RemoteRegion descriptor{kBackend, options_.rank,
                          reinterpret_cast<uint64_t>(data), bytes,
                          std::move(packed)};
  return MemoryRegion(data, bytes, std::move(descriptor),
                      std::move(registration));
}

absl::StatusOr<MemoryRegion> UcxTransport::Allocate(size_t bytes) {
  return Map(nullptr, bytes, /*allocate=*/true);
}

absl::StatusOr<MemoryRegion> UcxTransport::Register(
    absl::Span<std::byte> memory) {
  if (memory.data() == nullptr) {
    return absl::InvalidArgumentError("cannot register an empty span");
  }
  return Map(memory.data(), memory.size(), /*allocate=*/false);
}

absl::StatusOr<std::unique_ptr<Endpoint>> UcxTransport::Connect(
    const PeerInfo& peer) {
  if (peer.rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot connect to negative rank ", peer.rank));
  }
  absl::StatusOr<WorkerAddress> worker_address = UnwrapWorkerAddress(peer.address);
  if (!worker_address.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "address of rank ", peer.rank, " is not a UCX worker address: ",
        worker_address.status().message(), "; do all ranks use the ucx transport?"));
  }
  const ProcessIdentity& identity = worker_address->identity;
  auto state = std::make_shared<UcxEndpointState>();
  state->worker = shared_.get();
  state->peer_rank = peer.rank;
  state->peer_identity = identity;
  // UCX 1.13's shared-memory transports cannot detect a dead peer, and
  // asking for peer error handling would exclude them; so a peer whose
  // process we can check (same host and PID namespace) is watched by pid
  // instead (peer_liveness.h). Any other peer, on another host or in another
  // PID namespace (another container on this host), gets UCX's peer error
  // handling. That excludes shared memory, which UCX 1.13 cannot use across
  // PID namespaces anyway: posix and cma are unreachable there, and an mm
  // endpoint reads /proc/<peer pid> when it connects.
  const bool watched = CanWatchProcess(*self_, identity);
  state->watched = watched;
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(worker_address->ucx.data());
  params.err_mode =
      watched ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &OnEndpointError;
  params.err_handler.arg = state.get();
  const ucs_status_t created = ucp_ep_create(shared_->worker, &params, &state->ep);
  if (created != UCS_OK) {
    std::string hint;
    if (created == UCS_ERR_UNREACHABLE && tcp_on_loopback_by_default_ &&
        self_->boot_id != identity.boot_id) {
      hint =
          absl::StrCat(" (rank ", peer.rank,
                       " runs on another host, and TCP uses only "
                       "the loopback interface unless told otherwise: pass "
                       "net_devices=<interface>, e.g. net_devices=eth0, or set "
                       "UCX_NET_DEVICES)");
    } else if (created == UCS_ERR_UNREACHABLE && !watched &&
               self_->boot_id == identity.boot_id) {
      hint = absl::StrCat(
          " (rank ", peer.rank,
          " runs on this host but its process cannot be "
          "watched from here: another PID namespace, e.g. another container, "
          "or a /proc of another namespace; shared memory cannot detect its "
          "death, so it needs a transport that can, e.g. tcp in `tls`)");
    }
    return UcsToStatus(
        created, absl::StrCat("rank ", options_.rank, " connecting to rank ",
                              peer.rank, hint));
  }
  if (watched) shared_->watched.push_back(state);
  state->copies = watched && MapsPeerMemory(options_.tls);
  // Puts go in post order only down one TCP lane of the UCX version that
  // was checked (ep_lanes.h), and never where a copy through a mapping
  // could overtake them.
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  state->orders_writes = !state->copies && TcpLaneOrdersPuts(major, minor) &&
                         OneTcpLane(UcxEndpoint::LanesOf(state->ep));
  auto endpoint = std::make_unique<UcxEndpoint>(std::move(state));
  if (!options_.flag_notifications) {
    endpoint->NoFlags("notify=am");
  } else if (!watched) {
    endpoint->NoFlags("the peer is on another host or in another PID namespace");
  } else if (!MapsPeerMemory(options_.tls)) {
    endpoint->NoFlags("no shared memory in tls");
  } else if (!worker_address->inbox.has_value()) {
    endpoint->NoFlags("the peer offers no flag inbox");
  } else {
    endpoint->UseFlagInbox(*worker_address->inbox);
  }
  return std::unique_ptr<Endpoint>(std::move(endpoint));
}

void UcxTransport::WatchPeers() {
  // Called on every Progress(): the coarse clock costs a memory read. (Not
  // on every 8th call only: a wait that sleeps between calls would then
  // see a dead peer up to 8 sleeps late.)
  const int64_t now = CoarseMonotonicNanos();
  if (now < next_watch_ns_) return;
  const int64_t interval = absl::ToInt64Nanoseconds(options_.keepalive_interval);
  next_watch_ns_ = now > std::numeric_limits<int64_t>::max() - interval
                       ? std::numeric_limits<int64_t>::max()
                       : now + interval;
  for (size_t i = 0; i < shared_->watched.size();) {
    std::shared_ptr<UcxEndpointState> state = shared_->watched[i].lock();
    // Closed endpoints stay watched until UCX has given back their
    // operations: a peer that dies meanwhile must not leave them hanging.
    if (state == nullptr ||
        (state->ep == nullptr && state->in_flight.empty())) {
      shared_->watched[i] = std::move(shared_->watched.back());
      shared_->watched.pop_back();
      continue;
    }
    if (UcxOps::NoticeExitedPeer(*state)) {
      absl::Status released = UcxOps::ReleaseEndpoint(state);
      if (!released.ok()) {
        std::fprintf(stderr, "rdmaflow: %s\n", released.ToString().c_str());
      }
    }
    ++i;
  }
}

void UcxTransport::PollClosing() {
  for (size_t i = 0; i < shared_->closing.size();) {
    UcxWorkerState::Closing& closing = shared_->closing[i];
    if (ucp_request_check_status(closing.request) == UCS_INPROGRESS) {
      ++i;
      continue;
    }
    // Done, or failed with the peer: either way UCX is done with the keys.
    ucp_request_free(closing.request);
    UcxOps::DestroyRemoteKeys(*closing.state);
    shared_->closing[i] = std::move(shared_->closing.back());
    shared_->closing.pop_back();
  }
}

absl::StatusOr<int> UcxTransport::Progress() {
  while (ucp_worker_progress(shared_->worker) != 0) {
  }
  if (inbox_reader_ != nullptr) {
    inbox_reader_->Poll(
        [this](int rank, uint32_t value) {
          notifications_.Push(Notification{rank, value});
        },
        [this](uint32_t lane) {
          notifications_.CountMalformed(absl::StrCat(
              "flag lane ", lane, " of our inbox, whose owner names no rank"));
        });
  }
  if (!shared_->closing.empty()) PollClosing();
  if (!shared_->watched.empty()) WatchPeers();
  if (!shared_->to_pump.empty()) {
    std::vector<std::shared_ptr<UcxEndpointState>> batch;
    batch.swap(shared_->to_pump);
    for (const auto& state : batch) UcxOps::PumpSequence(*state);
  }
  const int fired = shared_->completions.FireAll();
  if (!shared_->retired.empty()) {
    auto& retired = shared_->retired;
    retired.erase(std::remove_if(retired.begin(), retired.end(),
                                 [](const std::shared_ptr<UcxEndpointState>& state) {
                                   return state->outstanding == 0;
                                 }),
                  retired.end());
  }
  return fired;
}

bool UcxTransport::WaitForActivity(absl::Duration timeout) {
  if (event_fd_ < 0) return Transport::WaitForActivity(timeout);
  // Work no socket announces: completions queued by a post since the last
  // Progress() (one UCX finished at once), sequences to pump.
  if (!shared_->completions.empty() || !shared_->to_pump.empty()) return true;
  // UCS_ERR_BUSY: the worker's own events (its internal signal, the
  // keepalive timer) are pending. Data on a socket does not make arming
  // fail: the worker's and TCP's epoll sets are level-triggered (never
  // ask for UCP_WAKEUP_EDGE), so a socket with data left keeps the file
  // descriptor readable and the poll returns at once.
  const ucs_status_t armed = ucp_worker_arm(shared_->worker);
  if (armed == UCS_ERR_BUSY) return true;
  if (armed != UCS_OK) return Transport::WaitForActivity(timeout);
  const timespec wait = absl::ToTimespec(std::max(absl::ZeroDuration(), timeout));
  pollfd event{event_fd_, POLLIN, 0};
  return ppoll(&event, 1, &wait, nullptr) > 0;
}

void UcxTransport::InterruptWait() {
  if (event_fd_ < 0) return;
  // A failed signal leaves the wait to end at its timeout, as before.
  static_cast<void>(ucp_worker_signal(shared_->worker));
}

std::optional<Notification> UcxTransport::PollNotification() {
  return notifications_.Pop();
}

ucp_context_h UcxTransport::context() const { return context_->context; }

absl::Status RegisterUcxTransport(TransportRegistry& registry) {
  return registry.Register(
      kBackend, /*priority=*/100,
      [](const TransportConfig& config)
          -> absl::StatusOr<std::unique_ptr<Transport>> {
        RETURN_IF_ERROR(CheckKnownParams(
            config, kBackend,
            {"tls", "net_devices", "keepalive_ms", "max_outstanding",
             "notify", "tcp_tx_seg_kb", "streaming_copy_kb"}));
        UcxTransportOptions options;
        options.rank = config.rank;
        for (const auto& [key, value] : config.params) {
          bool ok = true;
          if (key == "tls") {
            options.tls = value;
          } else if (key == "net_devices") {
            options.net_devices = value;
          } else if (key == "notify") {
            if (value != "flag" && value != "am") {
              return absl::InvalidArgumentError(absl::StrCat(
                  "ucx parameter notify='", value,
                  "' must be flag (a same-host peer's shared-memory inbox, "
                  "the default) or am (active messages)"));
            }
            options.flag_notifications = value == "flag";
          } else if (key == "keepalive_ms") {
            int64_t ms = 0;
            ok = absl::SimpleAtoi(value, &ms) && ms > 0;
            options.keepalive_interval = absl::Milliseconds(ms);
          } else if (key == "max_outstanding") {
            ok = absl::SimpleAtoi(value, &options.max_outstanding_per_endpoint);
          } else if (key == "streaming_copy_kb") {
            int64_t kb = 0;
            if (!absl::SimpleAtoi(value, &kb) || kb < 0 || kb > (int64_t{1} << 30)) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "ucx parameter streaming_copy_kb='", value,
                  "' must be a size in KiB from which writes into a same-host peer use "
                  "streaming stores (", kDefaultStreamingCopyMinBytes / 1024,
                  " by default; 0: never)"));
            }
            options.streaming_copy_min = static_cast<size_t>(kb) * 1024;
          } else if (key == "tcp_tx_seg_kb") {
            if (!absl::SimpleAtoi(value, &options.tcp_tx_seg_kb) ||
                options.tcp_tx_seg_kb < 0) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "ucx parameter tcp_tx_seg_kb='", value,
                  "' must be a size in KiB, 1 to 64 (64 by default; 0: UCX's own, 8)"));
            }
          }
          if (!ok) {
            return absl::InvalidArgumentError(absl::StrCat(
                "ucx parameter ", key, "='", value,
                "' must be a positive integer"));
          }
        }
        return UcxTransport::Create(options);
      },
      ProbeUcx);
}

}  // namespace rdmaflow::rdma::ucx
