#include "device/device_runtime.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/poll_until.h"

namespace rdmaflow::device {

absl::Status CheckReduceArgs(const ReduceArgs& args) {
  using collectives::DataType;
  using collectives::ReduceOp;
  if (args.srcs.empty() || args.srcs.size() > ReduceArgs::kMaxSources) {
    return absl::InvalidArgumentError(absl::StrCat("device reduce: ", args.srcs.size(),
                                                   " sources; 1 to ", ReduceArgs::kMaxSources,
                                                   " are supported"));
  }
  if (args.type != DataType::kFloat32 && args.type != DataType::kFloat16 &&
      args.type != DataType::kBFloat16) {
    return absl::InvalidArgumentError(
        absl::StrCat("device reduce: ", collectives::DataTypeName(args.type),
                     " is not supported (float32, float16, bfloat16 are)"));
  }
  if (args.op != ReduceOp::kSum && args.op != ReduceOp::kMax) {
    return absl::InvalidArgumentError(absl::StrCat("device reduce: ",
                                                   collectives::ReduceOpName(args.op),
                                                   " is not supported (sum, max are)"));
  }
  if (args.count == 0) return absl::OkStatus();
  if (args.dst == nullptr) return absl::InvalidArgumentError("device reduce: null destination");
  for (size_t i = 0; i < args.srcs.size(); ++i) {
    if (args.srcs[i] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("device reduce: source ", i, " is null"));
    }
  }
  return absl::OkStatus();
}

absl::Status Event::WaitUntil(absl::Time deadline, const std::string& what) {
  absl::StatusOr<bool> done = PollUntil([this] { return Done(); }, deadline);
  if (!done.ok()) return done.status();
  if (*done) return absl::OkStatus();
  return absl::DeadlineExceededError(
      absl::StrCat("device: ", what, " did not complete by its deadline"));
}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    Reset();
    owner_ = std::exchange(other.owner_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void DeviceMemory::Reset() {
  if (owner_ != nullptr && data_ != nullptr) owner_->Release(data_, size_);
  owner_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}

}  // namespace rdmaflow::device
