// File: testing/local_exchange.cc
#include "compression/testing/local_exchange.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "collectives/reduce.h"
#include "common/status_macros.h"

namespace rdmaflow::compression::testing {

absl::StatusOr<std::vector<std::vector<float>>> RunLocalStep(
    const std::vector<Codec*>& codecs, const std::vector<std::vector<float>>& gradients,
    uint64_t step, const LocalExchangeOptions& options) {
  const size_t members = codecs.size();
  std::vector<std::vector<std::byte>> scratch(members);
  std::vector<std::vector<float>> out(members);
  std::vector<Round> rounds(members);
  for (size_t m = 0; m < members; ++m) {
    scratch[m].assign(codecs[m]->scratch_bytes(), std::byte{0});
    out[m].assign(codecs[m]->count(), 0.0f);
    ASSIGN_OR_RETURN(rounds[m], codecs[m]->Begin(gradients[m], step, absl::MakeSpan(scratch[m])));
  }
  for (int round = 0;; ++round) {
    const Round& r = rounds[0];
    for (size_t m = 1; m < members; ++m) {
      if (rounds[m].exchange != r.exchange || rounds[m].offset != r.offset ||
          (r.exchange != Exchange::kAllGather && rounds[m].bytes != r.bytes)) {
        return absl::InternalError(absl::StrCat("members 0 and ", m, " disagree on round ",
                                                round));
      }
    }
    std::vector<std::vector<std::byte>> messages;
    if (r.exchange == Exchange::kAllGather) {
      for (size_t m = 0; m < members; ++m) {
        const std::byte* at = scratch[m].data() + rounds[m].offset;
        messages.emplace_back(at, at + rounds[m].bytes);
      }
    } else {
      const size_t count = r.bytes / collectives::ElementSize(r.type);
      std::vector<std::byte> total(scratch[0].begin() + r.offset,
                                   scratch[0].begin() + r.offset + r.bytes);
      for (size_t m = 1; m < members; ++m) {
        collectives::Reduce(r.type,
                            r.exchange == Exchange::kAllReduceMax ? collectives::ReduceOp::kMax
                                                                  : collectives::ReduceOp::kSum,
                            total.data(), scratch[m].data() + r.offset, count);
      }
      for (size_t m = 0; m < members && r.bytes > 0; ++m) {
        std::memcpy(scratch[m].data() + r.offset, total.data(), r.bytes);
      }
    }
    bool done = false;
    for (size_t m = 0; m < members; ++m) {
      std::vector<std::vector<std::byte>> copies = messages;
      if (options.tamper) {
        options.tamper(round, static_cast<int>(m), absl::MakeSpan(scratch[m]), copies);
      }
      std::vector<absl::Span<const std::byte>> gathered;
      for (const auto& message : copies) gathered.emplace_back(message);
      ASSIGN_OR_RETURN(std::optional<Round> next,
                       codecs[m]->Next(absl::MakeSpan(scratch[m]), gathered,
                                       absl::MakeSpan(out[m]), options.scale));
      done = !next.has_value();
      if (next.has_value()) rounds[m] = *next;
    }
    if (done) return out;
  }
}

}  // namespace rdmaflow::compression::testing
