// File: device_copy.cc
#include "bench/device_copy.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"

namespace rdmaflow::bench {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(60);

}  // namespace

absl::Status DrainStream(device::Stream& stream, device::Event& event, const std::string& what) {
  RETURN_IF_ERROR(stream.Record(event));
  return event.WaitUntil(absl::Now() + kTimeout, what);
}

absl::Status CopyAndDrain(device::Stream& stream, device::Event& event, void* to,
                          const void* from, size_t bytes, const std::string& what) {
  RETURN_IF_ERROR(stream.Copy(to, from, bytes));
  return DrainStream(stream, event, what);
}

absl::StatusOr<double> DeviceCopySeconds(device::Stream& stream, device::Event& event, void* to,
                                         const void* from, size_t bytes, int iterations) {
  if (iterations <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("timing ", iterations, " device copies"));
  }
  // One copy first: the timed ones find the memory mapped and warm.
  RETURN_IF_ERROR(CopyAndDrain(stream, event, to, from, bytes, "a warm-up device copy"));
  const absl::Time start = absl::Now();
  for (int i = 0; i < iterations; ++i) RETURN_IF_ERROR(stream.Copy(to, from, bytes));
  RETURN_IF_ERROR(DrainStream(stream, event, "the reference device copies"));
  return absl::ToDoubleSeconds(absl::Now() - start) / iterations;
}

}  // namespace rdmaflow::bench
