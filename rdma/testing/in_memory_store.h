// File: in_memory_store.h
// -----------------------------------------------------------------------------
// InMemoryStore: a Store for ranks that run as threads of one process (tests,
// the benchmark's thread mode), like gloo's HashStore.
#ifndef RDMAFLOW_RDMA_TESTING_IN_MEMORY_STORE_H_
#define RDMAFLOW_RDMA_TESTING_IN_MEMORY_STORE_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "rdma/store.h"

namespace rdmaflow::rdma::testing {

// Thread-safe.
class InMemoryStore final : public Store {
 public:
  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout) override;
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rdmaflow::rdma::testing

#endif  // RDMAFLOW_RDMA_TESTING_IN_MEMORY_STORE_H_
