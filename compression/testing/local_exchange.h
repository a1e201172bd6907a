// File: testing/local_exchange.h
// -----------------------------------------------------------------------------
// Runs codecs' rounds in memory, as the collectives would over the wire:
// what the codec tests, the benchmark and the hostile cases drive codecs
// with, one codec per member in one thread.
#ifndef RDMAFLOW_COMPRESSION_TESTING_LOCAL_EXCHANGE_H_
#define RDMAFLOW_COMPRESSION_TESTING_LOCAL_EXCHANGE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compression/codec.h"

namespace rdmaflow::compression::testing {

struct LocalExchangeOptions {
  float scale = 1.0f;
  // Called on every member's exchanged scratch (and, for an all-gather, its
  // copy of each message) before the codec reads it: a forged peer.
  std::function<void(int round, int member, absl::Span<std::byte> scratch,
                     std::vector<std::vector<std::byte>>& gathered)>
      tamper;
};

// One step: member m's codec (codecs[m], member m of codecs.size()) begins
// on gradients[m]; each round is exchanged (all-reduces summed in member
// order, all-gathers copied to everyone); returns each member's output.
// The first codec error (its member's).
absl::StatusOr<std::vector<std::vector<float>>> RunLocalStep(
    const std::vector<Codec*>& codecs, const std::vector<std::vector<float>>& gradients,
    uint64_t step, const LocalExchangeOptions& options = {});

}  // namespace rdmaflow::compression::testing

#endif  // RDMAFLOW_COMPRESSION_TESTING_LOCAL_EXCHANGE_H_
