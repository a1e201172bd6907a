// File: envelope_fuzzer.cc
// -----------------------------------------------------------------------------
// libFuzzer target for the UCX envelopes a peer publishes in the store: the
// input is a value as a store writer would have left it, unwrapped as a
// remote key and as a worker address, and decoded as the process identity
// an address carries (a checksum the fuzzer rarely matches guards that one
// inside the envelope). Whatever unwraps must wrap back to the same bytes,
// its flag inbox section included. Built by tools/fuzz.sh with
// --config=fuzz; without it, a no-op binary.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "rdma/ucx/envelope.h"
#include "rdma/ucx/peer_liveness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rdmaflow::rdma::ucx;  // NOLINT: a fuzz entry point
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (auto identity = ProcessIdentity::Decode(bytes); identity.ok()) {
    if (identity->Encode() != bytes) std::abort();
  }
  if (auto key = UnwrapRkey(bytes); key.ok()) {
    if (WrapRkey(key->data(), key->size()) != bytes) std::abort();
  }
  if (auto address = UnwrapWorkerAddress(bytes); address.ok()) {
    if (address->ucx.empty()) std::abort();
    // The identity decoded strictly: it encodes back to what was read.
    const std::string again = WrapWorkerAddress(
        address->identity, address->ucx.data(), address->ucx.size(), address->inbox);
    const WorkerAddress reread = UnwrapWorkerAddress(again).value();
    if (reread.ucx != address->ucx) std::abort();
    if (reread.inbox.has_value() != address->inbox.has_value()) std::abort();
    if (reread.inbox.has_value() && (reread.inbox->rkey != address->inbox->rkey ||
                                     reread.inbox->address != address->inbox->address ||
                                     reread.inbox->bytes != address->inbox->bytes ||
                                     reread.inbox->lanes != address->inbox->lanes ||
                                     reread.inbox->slots != address->inbox->slots)) {
      std::abort();
    }
  }
  return 0;
}
