#include "rdma/loopback/loopback_transport.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/shared_word.h"
#include "common/status_macros.h"
#include "rdma/slice.h"

namespace rdmaflow::rdma::loopback {
namespace {

constexpr char kBackend[] = "loopback";
constexpr size_t kPageSize = 4096;

// The packed remote key: the fabric id and the region key, so a descriptor
// from another fabric is rejected rather than aliased.
std::string PackKey(uint64_t fabric_id, uint64_t key) {
  return absl::StrCat(fabric_id, ":", key);
}

absl::StatusOr<uint64_t> UnpackKey(const RemoteRegion& region,
                                   uint64_t fabric_id) {
  std::pair<std::string, std::string> parts =
      absl::StrSplit(region.packed_key, absl::MaxSplits(':', 1));
  uint64_t fabric = 0, key = 0;
  if (!absl::SimpleAtoi(parts.first, &fabric) ||
      !absl::SimpleAtoi(parts.second, &key)) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed loopback remote key in ",
                     region.DebugString()));
  }
  if (fabric != fabric_id) {
    return absl::InvalidArgumentError(absl::StrCat(
        region.DebugString(), " was registered on loopback fabric ", fabric,
        ", not on this endpoint's fabric ", fabric_id));
  }
  return key;
}

std::shared_ptr<LoopbackFabric> DefaultFabric() {
  static auto* fabric = new std::shared_ptr<LoopbackFabric>(
      LoopbackFabric::Create());
  return *fabric;
}

// Unregisters the key (and frees memory the transport allocated).
class LoopbackRegistration final : public MemoryRegion::Registration {
 public:
  LoopbackRegistration(std::shared_ptr<LoopbackFabric> fabric, uint64_t key,
                       std::byte* owned)
      : fabric_(std::move(fabric)), key_(key), owned_(owned) {}
  ~LoopbackRegistration() override {
    fabric_->UnregisterRegion(key_);
    std::free(owned_);
  }

 private:
  std::shared_ptr<LoopbackFabric> fabric_;
  uint64_t key_;
  std::byte* owned_;
};

}  // namespace

// Thread-compatible, like its transport.
class LoopbackEndpoint final : public Endpoint {
 public:
  LoopbackEndpoint(LoopbackTransport* transport, int peer_rank)
      : transport_(transport),
        state_(std::make_shared<LoopbackTransport::EndpointState>()) {
    state_->peer_rank = peer_rank;
  }
  ~LoopbackEndpoint() override { Close().IgnoreError(); }

  int peer_rank() const override { return state_->peer_rank; }
  bool OrdersWrites() const override { return transport_->options_.orders_writes; }

  absl::Status PostWrite(const LocalSlice& src, const RemoteSlice& dst,
                         std::optional<uint32_t> notification,
                         Completion done) override {
    return PostData(LoopbackTransport::Op::Kind::kWrite, src, dst,
                    notification, std::move(done));
  }

  absl::Status PostWriteWithFlag(const LocalSlice& src, const RemoteSlice& dst,
                                 const RemoteSlice& flag_word, uint64_t flag,
                                 Completion done) override {
    RETURN_IF_ERROR(CheckTransfer(src, dst, state_->peer_rank, kBackend));
    RETURN_IF_ERROR(CheckFlagWord(flag_word, dst, state_->peer_rank, kBackend));
    ASSIGN_OR_RETURN(uint64_t flag_key,
                     UnpackKey(*flag_word.region, transport_->options_.fabric->id()));
    RETURN_IF_ERROR(PostData(LoopbackTransport::Op::Kind::kWrite, src, dst,
                             std::nullopt, std::move(done)));
    // Operations run in post order: the flag lands after this write's data
    // and every earlier write's.
    LoopbackTransport::Op& op = transport_->pending_.back();
    op.flag = flag;
    op.flag_address = flag_word.address();
    op.flag_key = flag_key;
    return absl::OkStatus();
  }

  absl::Status PostRead(const LocalSlice& dst, const RemoteSlice& src,
                        Completion done) override {
    return PostData(LoopbackTransport::Op::Kind::kRead, dst, src, std::nullopt,
                    std::move(done));
  }

  absl::Status PostFlush(Completion done) override {
    RETURN_IF_ERROR(CheckPostable());
    ++state_->outstanding;
    transport_->pending_.push_back(LoopbackTransport::Op{
        LoopbackTransport::Op::Kind::kFlush, state_, nullptr, 0, 0, 0,
        std::nullopt, std::move(done)});
    return absl::OkStatus();
  }

  absl::Status Close() override {
    state_->closed = true;
    return absl::OkStatus();
  }

  absl::StatusOr<std::byte*> MapRemote(const RemoteSlice& remote) override {
    RETURN_IF_ERROR(CheckRemoteSlice(remote, state_->peer_rank, kBackend));
    if (state_->closed) {
      return absl::FailedPreconditionError(absl::StrCat(
          "endpoint to rank ", state_->peer_rank, " is closed"));
    }
    ASSIGN_OR_RETURN(uint64_t key,
                     UnpackKey(*remote.region, transport_->options_.fabric->id()));
    return transport_->options_.fabric->Map(state_->peer_rank, remote.address(),
                                            key, remote.length);
  }

 private:
  absl::Status CheckPostable() const {
    if (state_->closed) {
      return absl::FailedPreconditionError(absl::StrCat(
          "endpoint to rank ", state_->peer_rank, " is closed"));
    }
    if (!state_->failure.ok()) return state_->failure;
    if (state_->outstanding >=
        transport_->options_.max_outstanding_per_endpoint) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "endpoint to rank ", state_->peer_rank, " has ",
          state_->outstanding,
          " operations in flight (the limit); call Progress() and retry"));
    }
    return absl::OkStatus();
  }

  absl::Status PostData(LoopbackTransport::Op::Kind kind,
                        const LocalSlice& local, const RemoteSlice& remote,
                        std::optional<uint32_t> notification,
                        Completion done) {
    RETURN_IF_ERROR(
        CheckTransfer(local, remote, state_->peer_rank, kBackend));
    RETURN_IF_ERROR(CheckPostable());
    ASSIGN_OR_RETURN(uint64_t key,
                     UnpackKey(*remote.region, transport_->options_.fabric->id()));
    ++state_->outstanding;
    transport_->pending_.push_back(LoopbackTransport::Op{
        kind, state_, local.data(), remote.address(), key, local.length,
        notification, std::move(done)});
    return absl::OkStatus();
  }

  LoopbackTransport* transport_;
  std::shared_ptr<LoopbackTransport::EndpointState> state_;
};

absl::StatusOr<std::unique_ptr<LoopbackTransport>> LoopbackTransport::Create(
    LoopbackTransportOptions options) {
  if (options.rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("loopback transport rank must be >= 0, got ",
                     options.rank));
  }
  if (options.max_outstanding_per_endpoint == 0) {
    return absl::InvalidArgumentError(
        "loopback max_outstanding_per_endpoint must be > 0");
  }
  if (options.fabric == nullptr) options.fabric = DefaultFabric();
  RETURN_IF_ERROR(options.fabric->Join(options.rank));
  return std::unique_ptr<LoopbackTransport>(
      new LoopbackTransport(std::move(options)));
}

LoopbackTransport::~LoopbackTransport() {
  options_.fabric->Leave(options_.rank);
  // Operations never executed still owe their callbacks exactly once.
  for (Op& op : pending_) {
    std::move(op.done)(absl::CancelledError(absl::StrCat(
        "loopback transport of rank ", options_.rank, " was destroyed")));
  }
  completions_.FireAll();
}

Capabilities LoopbackTransport::capabilities() const {
  return Capabilities{kBackend,
                      absl::StrCat("in-process loopback fabric ",
                                   options_.fabric->id()),
                      /*one_sided_allocate=*/false,
                      options_.max_outstanding_per_endpoint,
                      /*maps_peer_memory=*/true, /*flag_writes=*/true};
}

std::string LoopbackTransport::address() const {
  return absl::StrCat("loopback:", options_.fabric->id(), ":", options_.rank);
}

absl::StatusOr<MemoryRegion> LoopbackTransport::MakeRegion(std::byte* data,
                                                           size_t size,
                                                           bool owned) {
  const uint64_t key =
      options_.fabric->RegisterRegion(options_.rank, data, size);
  RemoteRegion descriptor{kBackend, options_.rank,
                          reinterpret_cast<uint64_t>(data), size,
                          PackKey(options_.fabric->id(), key)};
  return MemoryRegion(data, size, std::move(descriptor),
                      std::make_unique<LoopbackRegistration>(
                          options_.fabric, key, owned ? data : nullptr));
}

absl::StatusOr<MemoryRegion> LoopbackTransport::Allocate(size_t bytes) {
  if (bytes == 0) {
    return absl::InvalidArgumentError("cannot allocate a 0-byte region");
  }
  const size_t rounded = (bytes + kPageSize - 1) / kPageSize * kPageSize;
  void* memory = std::aligned_alloc(kPageSize, rounded);
  if (memory == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "rank ", options_.rank, " could not allocate ", bytes,
        " bytes for a loopback region"));
  }
  std::memset(memory, 0, rounded);
  return MakeRegion(static_cast<std::byte*>(memory), bytes, /*owned=*/true);
}

absl::StatusOr<MemoryRegion> LoopbackTransport::Register(
    absl::Span<std::byte> memory) {
  if (memory.empty() || memory.data() == nullptr) {
    return absl::InvalidArgumentError("cannot register an empty span");
  }
  return MakeRegion(memory.data(), memory.size(), /*owned=*/false);
}

absl::StatusOr<std::unique_ptr<Endpoint>> LoopbackTransport::Connect(
    const PeerInfo& peer) {
  const std::string expected = absl::StrCat(
      "loopback:", options_.fabric->id(), ":", peer.rank);
  if (peer.address != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "address '", peer.address, "' of rank ", peer.rank,
        " is not a loopback address on this fabric (expected '", expected,
        "'); do all ranks use the loopback transport in one process?"));
  }
  if (!options_.fabric->IsLive(peer.rank)) {
    return absl::UnavailableError(absl::StrCat(
        "peer rank ", peer.rank, " has no live loopback transport"));
  }
  return std::unique_ptr<Endpoint>(new LoopbackEndpoint(this, peer.rank));
}

void LoopbackTransport::Execute(Op& op) {
  EndpointState& endpoint = *op.endpoint;
  absl::Status status;
  if (endpoint.closed) {
    status = absl::CancelledError(absl::StrCat(
        "endpoint to rank ", endpoint.peer_rank, " was closed"));
  } else if (!endpoint.failure.ok()) {
    status = endpoint.failure;
  } else if (op.kind == Op::Kind::kWrite) {
    status = options_.fabric->Write(options_.rank, endpoint.peer_rank,
                                    op.local, op.address, op.key, op.length,
                                    op.notification);
    if (status.ok() && op.flag.has_value()) {
      absl::StatusOr<std::byte*> word = options_.fabric->Map(
          endpoint.peer_rank, op.flag_address, op.flag_key, sizeof(uint64_t));
      if (word.ok()) {
        StoreSharedWord(*word, *op.flag);
      } else {
        status = word.status();
      }
    }
  } else if (op.kind == Op::Kind::kRead) {
    status = options_.fabric->Read(endpoint.peer_rank, op.local, op.address,
                                   op.key, op.length);
  } else if (!options_.fabric->IsLive(endpoint.peer_rank)) {
    status = absl::UnavailableError(absl::StrCat(
        "peer rank ", endpoint.peer_rank,
        " is gone (its loopback transport was destroyed)"));
  }
  if (absl::IsUnavailable(status)) endpoint.failure = status;
  --endpoint.outstanding;
  completions_.Push(std::move(op.done), std::move(status));
}

absl::StatusOr<int> LoopbackTransport::Progress() {
  // Only the operations queued before this call: callbacks that post more
  // wait for the next call, so Progress() always returns.
  for (size_t n = pending_.size(); n > 0; --n) {
    Op op = std::move(pending_.front());
    pending_.pop_front();
    Execute(op);
  }
  return completions_.FireAll();
}

std::optional<Notification> LoopbackTransport::PollNotification() {
  return options_.fabric->PopNotification(options_.rank);
}

absl::Status RegisterLoopbackTransport(TransportRegistry& registry) {
  return registry.Register(
      kBackend, /*priority=*/0,
      [](const TransportConfig& config)
          -> absl::StatusOr<std::unique_ptr<Transport>> {
        RETURN_IF_ERROR(CheckKnownParams(config, kBackend, {"max_outstanding"}));
        LoopbackTransportOptions options;
        options.rank = config.rank;
        if (auto it = config.params.find("max_outstanding");
            it != config.params.end() &&
            !absl::SimpleAtoi(it->second,
                              &options.max_outstanding_per_endpoint)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "loopback max_outstanding must be an integer, got '",
              it->second, "'"));
        }
        return LoopbackTransport::Create(std::move(options));
      },
      [] {
        TransportProbeReport report;
        report.usable = true;
        report.found.push_back(
            "in-process: reaches only ranks of this process (tests, --mode=thread)");
        return report;
      });
}

}  // namespace rdmaflow::rdma::loopback
