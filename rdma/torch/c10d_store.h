// File: c10d_store.h
// -----------------------------------------------------------------------------
// C10dStore: rdmaflow's rendezvous Store over any LibTorch c10d::Store (a
// TCPStore, FileStore, HashStore, or the PrefixStore that
// torch.distributed.init_process_group hands a backend). c10d reports
// failures as exceptions; here they become Status, naming the key and the
// store.
//
//   c10::intrusive_ptr<c10d::Store> given = ...;  // from c10d
//   C10dStore store(given, "the job's store");
//   RETURN_IF_ERROR(store.Set("job/address/0", address));
#ifndef RDMAFLOW_RDMA_TORCH_C10D_STORE_H_
#define RDMAFLOW_RDMA_TORCH_C10D_STORE_H_

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rdma/store.h"

namespace rdmaflow::rdma::torch {

// Thread-safe when the wrapped store is (c10d's stores are).
class C10dStore : public Store {
 public:
  // `where` names the store in messages ("127.0.0.1:29500").
  C10dStore(c10::intrusive_ptr<c10d::Store> store, std::string where);

  // The c10d store itself, to hand to LibTorch (a process group).
  const c10::intrusive_ptr<c10d::Store>& store() const { return store_; }

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout) override;
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  std::string where_;
};

}  // namespace rdmaflow::rdma::torch

#endif  // RDMAFLOW_RDMA_TORCH_C10D_STORE_H_
