// File: testing/raw_peer.h
// -----------------------------------------------------------------------------
// RawPeer: for hostile-peer tests, a rank's raw access to another rank's
// registered memory. It connects through the store like any rank (the
// victim's published address), and writes whatever bytes the test forges
// where the protocol would have written honest ones: piece headers, flags,
// credits, stamps, metadata.
//
//   ASSIGN_OR_RETURN(RawPeer attacker,
//                    RawPeer::Connect(transport, store, "ns", /*victim=*/0, 4096));
//   ASSIGN_OR_RETURN(RemoteRegion inbox, FetchRegion(store, "ns", "inbox/0", timeout));
//   RETURN_IF_ERROR(attacker.WriteWord(inbox, /*offset=*/8, ~uint64_t{0}));
//
// Thread-compatible; `transport` must outlive it.
#ifndef RDMAFLOW_RDMA_TESTING_RAW_PEER_H_
#define RDMAFLOW_RDMA_TESTING_RAW_PEER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "rdma/endpoint.h"
#include "rdma/memory_region.h"
#include "rdma/remote_region.h"
#include "rdma/store.h"
#include "rdma/transport.h"

namespace rdmaflow::rdma::testing {

class RawPeer {
 public:
  // Connects to `victim`'s address published under `ns`, with a registered
  // scratch area of `scratch_bytes` to write from.
  static absl::StatusOr<RawPeer> Connect(Transport& transport, Store& store,
                                         absl::string_view ns, int victim,
                                         size_t scratch_bytes,
                                         absl::Duration timeout = absl::Seconds(60));

  // Writes `bytes` at `offset` of `region` (with `notification`, if any) and
  // waits for the write's completion. kInvalidArgument when `bytes` does
  // not fit the scratch area.
  absl::Status Write(const RemoteRegion& region, uint64_t offset,
                     absl::Span<const std::byte> bytes,
                     std::optional<uint32_t> notification = std::nullopt);
  absl::Status WriteWord(const RemoteRegion& region, uint64_t offset, uint64_t value);

 private:
  RawPeer(Transport& transport, std::unique_ptr<Endpoint> endpoint,
          std::unique_ptr<MemoryRegion> scratch, absl::Duration timeout);

  Transport* transport_;
  std::unique_ptr<Endpoint> endpoint_;
  std::unique_ptr<MemoryRegion> scratch_;
  absl::Duration timeout_;
};

}  // namespace rdmaflow::rdma::testing

#endif  // RDMAFLOW_RDMA_TESTING_RAW_PEER_H_
