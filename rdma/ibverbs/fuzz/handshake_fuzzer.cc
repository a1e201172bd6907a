// File: handshake_fuzzer.cc
// -----------------------------------------------------------------------------
// libFuzzer target for the ibverbs connection set-up's decoders: the input
// is what a peer (or anyone who reaches the listener) sends, decoded as a
// queue pair's info, a bootstrap handshake request, and rdmacm private data
// of a request and of an answer. Built by tools/fuzz.sh with --config=fuzz;
// without it, a no-op binary.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "rdma/ibverbs/bootstrap.h"
#include "rdma/ibverbs/rdmacm.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rdmaflow::rdma::ibverbs;  // NOLINT: a fuzz entry point
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  DecodeQueuePairInfo(bytes).IgnoreError();
  DecodeHandshakeRequest(bytes).IgnoreError();
  for (bool request : {true, false}) DecodeCmPeerInfo(bytes, request, "job").IgnoreError();
  return 0;
}
