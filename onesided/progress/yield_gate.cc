// File: yield_gate.cc
#include "onesided/progress/yield_gate.h"

#include <algorithm>

namespace rdmaflow::onesided {

void YieldGate::Yielded(uint64_t wait, absl::Duration took) {
  ++yields_;
  if (took <= options_.slow) {
    if (++quick_in_a_row_ >= options_.quick_to_halve) {
      quick_in_a_row_ = 0;
      backoff_ /= 2;
      if (backoff_ < options_.first_backoff) backoff_ = 0;
    }
    return;
  }
  quick_in_a_row_ = 0;
  ++slow_yields_;
  backoff_ = backoff_ == 0 ? options_.first_backoff
                           : std::min(backoff_ * 2, options_.max_backoff);
  closed_until_ = wait + 1 + static_cast<uint64_t>(std::max<int64_t>(backoff_, 0));
}

}  // namespace rdmaflow::onesided
