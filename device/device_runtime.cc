#include "device/device_runtime.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace rdmaflow::device {

const char* MemoryKindName(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kHost:
      return "host";
    case MemoryKind::kDevice:
      return "device";
  }
  return "unknown";
}

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
