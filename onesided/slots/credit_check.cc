// File: credit_check.cc
#include "onesided/slots/credit_check.h"

#include "absl/strings/str_cat.h"

namespace rdmaflow::onesided {

absl::Status CheckCredit(absl::string_view peer, absl::string_view unit, uint64_t credit,
                         uint64_t previous, uint64_t sent) {
  constexpr absl::string_view kHint =
      " (does it run the same rdmaflow version? is anything else writing into our memory?)";
  if (credit < previous) {
    return absl::DataLossError(absl::StrCat(peer, " wrote a credit of ", credit, " after ",
                                            previous, "; credits never go back", kHint));
  }
  if (credit > sent) {
    return absl::DataLossError(absl::StrCat(peer, " wrote a credit releasing ", credit, " ",
                                            unit, ", but only ", sent, " were sent", kHint));
  }
  return absl::OkStatus();
}

}  // namespace rdmaflow::onesided
