#include "rdma/testing/raw_peer.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rdma/blocking.h"
#include "rdma/rendezvous.h"

namespace rdmaflow::rdma::testing {

RawPeer::RawPeer(Transport& transport, std::unique_ptr<Endpoint> endpoint,
                 std::unique_ptr<MemoryRegion> scratch, absl::Duration timeout)
    : transport_(&transport),
      endpoint_(std::move(endpoint)),
      scratch_(std::move(scratch)),
      timeout_(timeout) {}

absl::StatusOr<RawPeer> RawPeer::Connect(Transport& transport, Store& store,
                                         absl::string_view ns, int victim,
                                         size_t scratch_bytes, absl::Duration timeout) {
  ASSIGN_OR_RETURN(std::unique_ptr<Endpoint> endpoint,
                   ConnectToPeer(transport, store, ns, victim, timeout));
  ASSIGN_OR_RETURN(MemoryRegion scratch, transport.Allocate(scratch_bytes));
  return RawPeer(transport, std::move(endpoint),
                 std::make_unique<MemoryRegion>(std::move(scratch)), timeout);
}

absl::Status RawPeer::Write(const RemoteRegion& region, uint64_t offset,
                            absl::Span<const std::byte> bytes,
                            std::optional<uint32_t> notification) {
  if (bytes.size() > scratch_->size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "raw peer: ", bytes.size(), " bytes do not fit its scratch of ", scratch_->size()));
  }
  if (!bytes.empty()) std::memcpy(scratch_->data(), bytes.data(), bytes.size());
  return rdma::Write(*transport_, *endpoint_, {scratch_.get(), 0, bytes.size()},
                     {&region, offset, bytes.size()}, notification,
                     absl::Now() + timeout_);
}

absl::Status RawPeer::WriteWord(const RemoteRegion& region, uint64_t offset,
                                uint64_t value) {
  std::byte bytes[sizeof(value)];
  std::memcpy(bytes, &value, sizeof(value));
  return Write(region, offset, bytes);
}

}  // namespace rdmaflow::rdma::testing
