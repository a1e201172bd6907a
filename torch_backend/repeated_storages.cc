// File: repeated_storages.cc
#include "torch_backend/repeated_storages.h"

#include <algorithm>

namespace rdmaflow::torch_backend {

RepeatedStorages::RepeatedStorages(int sightings, size_t capacity)
    : sightings_(std::max(sightings, 1)), capacity_(std::max<size_t>(capacity, 1)) {}

bool RepeatedStorages::Sighted(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.has_storage()) return false;
  const c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  absl::MutexLock lock(&mu_);
  for (Seen& seen : seen_) {
    // A weak reference keeps the StorageImpl object (not its memory), so no
    // new storage can take the address of one remembered here.
    if (seen.storage._unsafe_get_target() == storage) {
      return ++seen.sightings == sightings_;
    }
  }
  if (seen_.size() >= capacity_) {
    seen_.erase(std::remove_if(seen_.begin(), seen_.end(),
                               [](const Seen& seen) { return seen.storage.expired(); }),
                seen_.end());
    if (seen_.size() >= capacity_) seen_.pop_front();
  }
  seen_.push_back(Seen{tensor.storage().getWeakStorageImpl(), 1});
  return sightings_ == 1;
}

void RepeatedStorages::Again(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.has_storage()) return;
  const c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  absl::MutexLock lock(&mu_);
  for (Seen& seen : seen_) {
    if (seen.storage._unsafe_get_target() == storage) seen.sightings = sightings_ - 1;
  }
}

size_t RepeatedStorages::size() const {
  absl::MutexLock lock(&mu_);
  return seen_.size();
}

}  // namespace rdmaflow::torch_backend
