// File: handshake_fuzzer.cc
// -----------------------------------------------------------------------------
// libFuzzer target for the ibverbs connection set-up's decoders: the input
// is what a peer (or anyone who reaches the listener) sends, decoded as a
// queue pair's info, a bootstrap handshake request and answer, and rdmacm
// private data of a request and of an answer. The MACs rarely verify on
// random input, so the input is also re-encoded with a valid MAC over its
// own fields, to drive the decoders past the check. Built by tools/fuzz.sh
// with --config=fuzz; without it, a no-op binary.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/string_view.h"
#include "rdma/ibverbs/admission.h"
#include "rdma/ibverbs/bootstrap.h"
#include "rdma/ibverbs/rdmacm.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rdmaflow::rdma::ibverbs;  // NOLINT: a fuzz entry point
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  constexpr char kToken[] = "job";
  const HandshakeTarget target{1, 0x1234};
  uint64_t nonce = 0;
  std::memcpy(&nonce, data, size < sizeof(nonce) ? size : sizeof(nonce));
  DecodeQueuePairInfo(bytes).IgnoreError();
  DecodeHandshakeRequest(bytes, kToken, target).IgnoreError();
  DecodeHandshakeAnswer(bytes, nonce, kToken).IgnoreError();
  DecodeCmRequest(bytes, kToken, target).IgnoreError();
  DecodeCmAnswer(bytes, nonce, kToken).IgnoreError();
  // The fields as a peer holding the token would send them: decoded past
  // the MAC, and a request's claims through the admission rules.
  if (absl::StatusOr<QueuePairInfo> info = DecodeQueuePairInfo(bytes);
      info.ok()) {
    if (absl::StatusOr<std::string> request =
            EncodeHandshakeRequest(*info, nonce, target, kToken);
        request.ok()) {
      DecodeHandshakeRequest(*request, kToken, target).IgnoreError();
    }
  }
  CmPeerInfo cm;
  if (size >= 40) {
    std::memcpy(&cm.rank, data + 8, sizeof(cm.rank));
    std::memcpy(&cm.marker_address, data + 12, sizeof(cm.marker_address));
    std::memcpy(&cm.notify_slots, data + 20, sizeof(cm.notify_slots));
  }
  if (absl::StatusOr<std::string> request =
          EncodeCmRequest(cm, nonce, target, kToken);
      request.ok()) {
    absl::StatusOr<CmRequest> decoded = DecodeCmRequest(*request, kToken, target);
    if (decoded.ok()) {
      AdmissionOptions options;
      options.local_rank = target.rank;
      options.world_size = 8;
      options.max_connections_per_rank = 2;
      options.max_remembered_nonces = 4;
      if (absl::StatusOr<PeerAdmission> admission = PeerAdmission::Create(options);
          admission.ok()) {
        for (size_t i = 0; i + 1 < size && i < 64; i += 2) {
          const Claim claim{static_cast<int32_t>(data[i] % 10) - 1,
                            static_cast<uint64_t>(data[i + 1] % 8), "x"};
          if (admission->Admit(claim).ok() && (data[i] & 1)) {
            admission->Release(claim.rank, false);
          }
        }
      }
    }
  }
  if (absl::StatusOr<std::string> answer = EncodeCmAnswer(cm, nonce, kToken);
      answer.ok()) {
    DecodeCmAnswer(*answer, nonce, kToken).IgnoreError();
  }
  return 0;
}
