// File: credit_writer.cc
#include "onesided/slots/credit_writer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/shared_word.h"

namespace rdmaflow::onesided {
namespace {
constexpr size_t kWord = sizeof(uint64_t);
}  // namespace

CreditWriter::CreditWriter(Options options)
    : options_(std::move(options)),
      wanted_(options_.words, 0),
      lo_(options_.words) {}

void CreditWriter::Set(int index, uint64_t value) {
  if (value <= wanted_[index]) return;
  wanted_[index] = value;
  lo_ = std::min(lo_, index);
  hi_ = std::max(hi_, index);
}

void CreditWriter::Fail(Shared& shared, const std::string& peer, const absl::Status& status) {
  if (!shared.failure.ok()) return;
  shared.failure = absl::Status(
      status.code(), absl::StrCat("returning credits to ", peer, ": ", status.message()));
}

absl::Status CreditWriter::Post() {
  Shared& shared = *shared_;
  if (!shared.failure.ok() || shared.busy || lo_ > hi_) return shared.failure;
  uint64_t* words =
      reinterpret_cast<uint64_t*>(options_.source->data() + options_.source_offset);
  for (int i = lo_; i <= hi_; ++i) {
    StoreSharedWord(&words[i], wanted_[i]);
  }
  const size_t bytes = static_cast<size_t>(hi_ - lo_ + 1) * kWord;
  absl::Status posted = options_.endpoint->PostWrite(
      {options_.source, options_.source_offset + lo_ * kWord, bytes},
      {options_.remote, options_.remote_offset + lo_ * kWord, bytes}, std::nullopt,
      [shared = shared_, peer = options_.peer, completed = options_.completed](
          absl::Status status) {
        shared->busy = false;
        if (!status.ok()) Fail(*shared, peer, status);
        if (completed) completed();
      });
  if (absl::IsResourceExhausted(posted)) return absl::OkStatus();  // the next call retries
  if (!posted.ok()) {
    Fail(shared, options_.peer, posted);
    return shared.failure;
  }
  shared.busy = true;
  ++writes_;
  if (options_.started) options_.started();
  lo_ = options_.words;
  hi_ = -1;
  return absl::OkStatus();
}

}  // namespace rdmaflow::onesided
