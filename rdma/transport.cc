// File: transport.cc
#include "rdma/transport.h"

#include "absl/time/clock.h"

namespace rdmaflow::rdma {

bool Transport::WaitForActivity(absl::Duration timeout) {
  if (timeout > absl::ZeroDuration()) absl::SleepFor(timeout);
  return false;
}

}  // namespace rdmaflow::rdma
