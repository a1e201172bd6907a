// File: connector.cc
#include "rdma/ibverbs/connector.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "rdma/internal/notify_ring.h"
#include "rdma/ibverbs/queue_pair.h"
#include "rdma/ibverbs/rdmacm.h"

namespace rdmaflow::rdma::ibverbs {
namespace {

// Version 2: the listener's instance id as a sixth field.
constexpr char kAddressMagic[] = "ibverbs2";
constexpr char kAddressMagicCm[] = "ibverbs2cm";

}  // namespace

std::string FormatAddress(bool use_rdmacm, int rank, absl::string_view host,
                          int port, absl::string_view device,
                          uint64_t instance) {
  return absl::StrCat(use_rdmacm ? kAddressMagicCm : kAddressMagic, "|", rank,
                      "|", host, "|", port, "|", device, "|",
                      absl::Hex(instance, absl::kZeroPad16));
}

absl::StatusOr<std::vector<std::shared_ptr<EndpointState>>> Connector::Connect(
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
  return lanes;
}

absl::StatusOr<std::shared_ptr<EndpointState>> Connector::ConnectLane(
    const PeerInfo& peer, const std::string& host, int port,
    const HandshakeTarget& target, bool notifies) {
  const Device& d = factory_.device();
  std::shared_ptr<EndpointState> state = queues_.NewState(peer.rank);
  ASSIGN_OR_RETURN(state->qp, factory_.Create(&state->max_inline));
  const uint32_t psn = RandomPsn();
  QueuePairInfo local = factory_.Describe(state->qp.get(), psn);
  // Flag notifications need the 8-byte record inline (its source is then
  // free at once) and a word for the peer's credits.
  const bool flags =
      notifies && options_.flags && state->max_inline >= kNotifyRecordBytes;
  if (flags) {
    ASSIGN_OR_RETURN(state->credit, registrar_.Allocate(kNotifyRecordBytes));
    local.notify_address = reinterpret_cast<uintptr_t>(state->credit.data());
    ASSIGN_OR_RETURN(
        local.notify_rkey,
        UnpackKey(state->credit.descriptor().packed_key, factory_.rank));
  }
  QueuePairInfo remote;
  if (options_.use_rdmacm) {
    CmPeerInfo request;
    request.rank = factory_.rank;
    request.marker_address = local.marker_address;
    request.marker_rkey = local.marker_rkey;
    request.notify_address = local.notify_address;
    request.notify_rkey = local.notify_rkey;
    CmPeerInfo answer;
    ASSIGN_OR_RETURN(
        state->cm, CmConnection::Connect(
                       host, port, target, request, options_.job_token,
                       options_.connect_timeout,
                       [&](rdma_cm_id* id) -> absl::StatusOr<ibv_qp*> {
                         // The route must lead out of our own device.
                         RETURN_IF_ERROR(factory_.CheckCmDevice(id, peer.rank));
                         return state->qp.get();
                       },
                       static_cast<uint8_t>(options_.ack_timeout),
                       static_cast<uint8_t>(options_.retry_count),
                       static_cast<uint8_t>(std::max(
                           1, std::min(16, d.device_attr.max_qp_rd_atom))),
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
        ExchangeQueuePairInfo(host, port, local, target, options_.job_token,
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
                                     factory_.options));
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

}  // namespace rdmaflow::rdma::ibverbs
