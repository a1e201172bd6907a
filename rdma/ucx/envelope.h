// File: envelope.h
// -----------------------------------------------------------------------------
// The envelopes around what a UCX transport publishes for its peers: its
// worker address (with its process identity in front, for the same-host
// liveness checks of peer_liveness.h, and where its flag inbox is) and each
// region's packed remote key.
// Each is a magic, an FNV-1a checksum of the payload, and the payload, so a
// descriptor from another backend, another version or a corrupted store
// entry is refused with a clear error before UCX parses it. The checksum
// is not a proof (the job token's is, rdma/rendezvous.h): it only catches
// what is not ours.
//
//   std::string published = WrapWorkerAddress(SelfIdentity(), address, length);
//   ASSIGN_OR_RETURN(WorkerAddress peer, UnwrapWorkerAddress(published));
//   // peer.identity, peer.ucx (what ucp_ep_create takes)
#ifndef RDMAFLOW_RDMA_UCX_ENVELOPE_H_
#define RDMAFLOW_RDMA_UCX_ENVELOPE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rdma/ucx/peer_liveness.h"

namespace rdmaflow::rdma::ucx {

// A region's remote key: UCX's packed rkey buffer (`size` bytes).
std::string WrapRkey(const void* rkey_buffer, size_t size);
// The packed rkey buffer; kInvalidArgument (bad header, checksum mismatch,
// empty) for anything else.
absl::StatusOr<std::string> UnwrapRkey(absl::string_view packed);

// Where a transport's flag inbox is (flag_inbox.h): its region and layout.
// The layout is checked where it is used (FlagInboxLayout::Validate).
struct FlagInboxAddress {
  uint64_t address = 0;
  uint64_t bytes = 0;
  uint32_t lanes = 0;
  uint32_t slots = 0;
  std::string rkey;  // UCX's packed rkey buffer, at least one byte
};

// A worker address as a peer sees it.
struct WorkerAddress {
  ProcessIdentity identity;
  std::string ucx;  // ucp_address_t bytes, at least one
  std::optional<FlagInboxAddress> inbox;  // None: notify by active message.
};

std::string WrapWorkerAddress(const ProcessIdentity& identity, const void* address,
                              size_t size,
                              const std::optional<FlagInboxAddress>& inbox = std::nullopt);
// kInvalidArgument naming what is wrong: not our envelope, a checksum
// mismatch, truncated, or a malformed identity (ProcessIdentity::Decode)
// or inbox section.
absl::StatusOr<WorkerAddress> UnwrapWorkerAddress(absl::string_view packed);

}  // namespace rdmaflow::rdma::ucx

#endif  // RDMAFLOW_RDMA_UCX_ENVELOPE_H_
