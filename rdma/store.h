// File: store.h
// -----------------------------------------------------------------------------
// Store: the rendezvous key-value store of the control plane, through which
// ranks exchange transport addresses and region descriptors before step 0.
// The production implementation wraps LibTorch's c10d::TCPStore (rdma/torch),
// the store torchrun uses; tests use InMemoryStore (rdma/testing).
#ifndef RDMAFLOW_RDMA_STORE_H_
#define RDMAFLOW_RDMA_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace rdmaflow::rdma {

// Thread-safe. Values are arbitrary bytes.
class Store {
 public:
  virtual ~Store() = default;

  // Sets `key` to `value`, replacing any previous value.
  // kUnavailable when the store server cannot be reached.
  virtual absl::Status Set(absl::string_view key, absl::string_view value) = 0;

  // Returns the value of `key`, waiting up to `timeout` for it to be set.
  // kDeadlineExceeded naming the key when it is not set in time.
  virtual absl::StatusOr<std::string> Get(absl::string_view key,
                                          absl::Duration timeout) = 0;

  // Waits up to `timeout` until every key is set.
  // kDeadlineExceeded naming the missing keys.
  virtual absl::Status Wait(const std::vector<std::string>& keys,
                            absl::Duration timeout) = 0;

  // Atomically adds `delta` to the integer counter `key` (0 if unset) and
  // returns the new value.
  virtual absl::StatusOr<int64_t> Add(absl::string_view key,
                                      int64_t delta) = 0;
};

}  // namespace rdmaflow::rdma

#endif  // RDMAFLOW_RDMA_STORE_H_
