// File: credit_check.h
// -----------------------------------------------------------------------------
// The sender's half of credit flow control: the one check every credit a
// receiver writes into our memory passes before it releases anything. A
// credit counts what the receiver has released; it never goes back and
// never releases more than was sent. Used by the slot ring (and so the
// Messenger, the ring all-reduce and rdma_copy) and the executor's per-slot
// credits.
#ifndef RDMAFLOW_ONESIDED_SLOTS_CREDIT_CHECK_H_
#define RDMAFLOW_ONESIDED_SLOTS_CREDIT_CHECK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/shared_word.h"

namespace rdmaflow::onesided {

// OK when `credit`, written by `peer` ("rank 2", "rank 2 (the right
// neighbour)"), may follow `previous` with `sent` `unit` ("messages",
// "tensors") sent; kDataLoss naming the peer and the values otherwise.
absl::Status CheckCredit(absl::string_view peer, absl::string_view unit, uint64_t credit,
                         uint64_t previous, uint64_t sent);

// Loads a credit word the peer writes (acquire: what it released is ours
// to reuse once we see it).
inline uint64_t LoadCredit(const void* word) { return LoadSharedWord(word); }

}  // namespace rdmaflow::onesided

#endif  // RDMAFLOW_ONESIDED_SLOTS_CREDIT_CHECK_H_
