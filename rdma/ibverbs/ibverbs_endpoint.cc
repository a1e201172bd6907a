// File: ibverbs_endpoint.cc
#include "rdma/ibverbs/ibverbs_endpoint.h"

#include <arpa/inet.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rdma/ibverbs/ibverbs_transport.h"
#include "rdma/ibverbs/queue_pair.h"
#include "rdma/slice.h"

namespace rdmaflow::rdma::ibverbs {

IbverbsEndpoint::~IbverbsEndpoint() {
  Close().IgnoreError();
  transport_->Forget(state_->id);
}

absl::Status IbverbsEndpoint::CheckUsable() const {
  const EndpointState& s = *state_;
  if (s.closed) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the endpoint to rank ", s.peer_rank, " is closed"));
  }
  if (!s.failure.ok()) return s.failure;
  if (s.operations >= transport_->options_.max_outstanding_per_endpoint) {
    return absl::ResourceExhaustedError(absl::StrCat(
        s.operations, " operations in flight towards rank ", s.peer_rank,
        "; progress the transport and retry"));
  }
  return absl::OkStatus();
}

absl::Status IbverbsEndpoint::Prepare(const LocalSlice& local,
                                      const RemoteSlice& remote, ibv_sge& sge,
                                      uint32_t& rkey) const {
  const EndpointState& s = *state_;
  RETURN_IF_ERROR(CheckUsable());
  RETURN_IF_ERROR(CheckTransfer(local, remote, s.peer_rank, kBackend));
  const auto* registration =
      dynamic_cast<const VerbsRegistration*>(local.region->registration());
  if (registration == nullptr ||
      registration->context() != transport_->context_.get()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the local region of an operation towards rank ", s.peer_rank,
        " was not registered with this ibverbs transport"));
  }
  ASSIGN_OR_RETURN(rkey, UnpackKey(remote.region->packed_key, s.peer_rank));
  sge.addr = reinterpret_cast<uintptr_t>(local.data());
  sge.lkey = registration->lkey();
  return absl::OkStatus();
}

absl::Status IbverbsEndpoint::PostWrite(const LocalSlice& src,
                                        const RemoteSlice& dst,
                                        std::optional<uint32_t> notification,
                                        Completion done) {
  ibv_sge sge{};
  uint32_t rkey = 0;
  RETURN_IF_ERROR(Prepare(src, dst, sge, rkey));
  return transport_->PostOperation(
      *state_, IBV_WR_RDMA_WRITE, notification, sge, src.length,
      dst.address(), rkey, std::move(done),
      notification ? "write with notification" : "write");
}

absl::Status IbverbsEndpoint::PostRead(const LocalSlice& dst,
                                       const RemoteSlice& src,
                                       Completion done) {
  ibv_sge sge{};
  uint32_t rkey = 0;
  RETURN_IF_ERROR(Prepare(dst, src, sge, rkey));
  return transport_->PostOperation(*state_, IBV_WR_RDMA_READ, std::nullopt,
                                   sge, dst.length, src.address(), rkey,
                                   std::move(done), "read");
}

absl::Status IbverbsEndpoint::PostFlush(Completion done) {
  RETURN_IF_ERROR(CheckUsable());
  return transport_->PostMarker(*state_, std::move(done), true);
}

absl::Status IbverbsEndpoint::Close() {
  EndpointState& s = *state_;
  if (s.closed) return absl::OkStatus();
  s.closed = true;
  // Not FailAll() at once: the adapter may touch a request's buffers until
  // its flush completion arrives, and a callback hands the buffer back.
  return transport_->CloseEndpoint(s);
}

}  // namespace rdmaflow::rdma::ibverbs
