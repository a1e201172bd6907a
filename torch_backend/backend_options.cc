#include "torch_backend/backend_options.h"

#include <string>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_cat.h"
#include "rdma/torch/run_scope.h"

namespace rdmaflow::torch_backend {
namespace {

const char* Variable(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

// Whether torch's allocator settings (PYTORCH_CUDA_ALLOC_CONF's syntax:
// key:value pairs, comma-separated) pick the cudaMallocAsync backend.
bool PicksCudaMallocAsync(absl::string_view conf) {
  for (absl::string_view setting : absl::StrSplit(conf, ',')) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(setting, ':');
    if (absl::StripAsciiWhitespace(kv.first) == "backend" &&
        absl::StripAsciiWhitespace(kv.second) == "cudaMallocAsync") {
      return true;
    }
  }
  return false;
}

// A size in units of 2^`shift` bytes (KiB: 10, MiB: 20), from `least` to
// 2^20 units.
absl::Status Size(const char* name, int shift, int64_t least, size_t& bytes) {
  const char* text = Variable(name);
  if (text == nullptr) return absl::OkStatus();
  int64_t units = 0;
  if (!absl::SimpleAtoi(text, &units) || units < least || units > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, "='", text, "' is not a size in ", shift == 10 ? "KiB" : "MiB", " between ",
        least, " and 1048576"));
  }
  bytes = static_cast<size_t>(units) << shift;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BackendOptions> BackendOptions::FromEnvironment(absl::Duration timeout) {
  BackendOptions options;
  options.timeout = timeout;
  if (const char* transport = Variable("RDMAFLOW_TRANSPORT")) {
    options.transport = transport;
  }
  if (const char* params = Variable("RDMAFLOW_TRANSPORT_PARAMS")) {
    options.transport_params = params;
  }
  if (absl::Status s = Size("RDMAFLOW_STAGING_MB", 20, 1, options.staging_bytes); !s.ok()) {
    return s;
  }
  if (absl::Status s = Size("RDMAFLOW_REGISTERED_MB", 20, 1, options.registered_bytes);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = Size("RDMAFLOW_INLINE_KB", 10, 0, options.inline_bytes); !s.ok()) {
    return s;
  }
  if (absl::Status s = Size("RDMAFLOW_DEVICE_MB", 20, 0, options.device_bytes); !s.ok()) {
    return s;
  }
  if (absl::Status s = Size("RDMAFLOW_DEVICE_POOL_MB", 20, 0, options.device_pool_bytes);
      !s.ok()) {
    return s;
  }
  if (const char* wait = Variable("RDMAFLOW_WAIT")) {
    absl::StatusOr<onesided::WaitPolicy> policy = onesided::WaitPolicy::Parse(wait);
    if (!policy.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("RDMAFLOW_WAIT: ", policy.status().message()));
    }
    options.wait = *policy;
  }
  if (const char* direct = Variable("RDMAFLOW_DIRECT")) {
    absl::StatusOr<collectives::DirectAccess> parsed = collectives::ParseDirectAccess(direct);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("RDMAFLOW_DIRECT: ", parsed.status().message()));
    }
    options.direct = *parsed;
  }
  if (const char* cma = Variable("RDMAFLOW_CMA")) {
    const std::string value = cma;
    if (value != "auto" && value != "off") {
      return absl::InvalidArgumentError(absl::StrCat(
          "RDMAFLOW_CMA: '", value, "' is neither auto (the default: same-host ranks read "
          "each other's ordinary tensors with process_vm_readv where every rank can) nor off "
          "(ordinary tensors are staged)"));
    }
    options.cma = value == "auto";
  }
  if (absl::Status s = Size("RDMAFLOW_CMA_MIN_KB", 10, 0, options.cma_min_bytes); !s.ok()) {
    return s;
  }
  if (const char* shared = Variable("RDMAFLOW_SHARED_TENSORS")) {
    const std::string value = shared;
    if (value != "on" && value != "off") {
      return absl::InvalidArgumentError(absl::StrCat(
          "RDMAFLOW_SHARED_TENSORS: '", value, "' is neither off (the default: CPU tensors "
          "stay where torch puts them) nor on (large CPU tensors are allocated in shared "
          "memory that same-host ranks read in place; docs/torch.md)"));
    }
    options.shared_tensors = value == "on";
  }
  if (absl::Status s = Size("RDMAFLOW_SHARED_TENSORS_MIN_KB", 10, 1,
                            options.shared_tensors_min_bytes);
      !s.ok()) {
    return s;
  }
  if (const char* p2p = Variable("RDMAFLOW_DEVICE_P2P")) {
    const std::string value = p2p;
    if (value != "auto" && value != "off") {
      return absl::InvalidArgumentError(absl::StrCat(
          "RDMAFLOW_DEVICE_P2P: '", value, "' is neither auto (the default: sends and "
          "receives of CUDA tensors between ranks of one host go device to device) nor off "
          "(through host memory)"));
    }
    options.device_p2p = value == "auto";
  }
  if (const char* device = Variable("RDMAFLOW_DEVICE")) {
    const std::string kind = device;
    if (kind != "cuda" && kind != "fake" && kind != "none") {
      return absl::InvalidArgumentError(absl::StrCat(
          "RDMAFLOW_DEVICE: '", kind, "' is not a device the backend knows: cuda (the "
          "default: the CUDA tensors' device), none (CPU tensors only, no CUDA context) "
          "or fake (tests without a GPU)"));
    }
    options.device = kind;
  }
  // Torch reads PYTORCH_ALLOC_CONF only where PYTORCH_CUDA_ALLOC_CONF is
  // not set.
  const char* conf = Variable("PYTORCH_CUDA_ALLOC_CONF");
  if (conf == nullptr) conf = Variable("PYTORCH_ALLOC_CONF");
  options.torch_cuda_malloc_async = conf != nullptr && PicksCudaMallocAsync(conf);
  if (const char* local = Variable("LOCAL_RANK")) {
    int parsed = -1;
    // Not ours to refuse: a value that is no rank gives no warning.
    if (absl::SimpleAtoi(local, &parsed) && parsed >= 0) options.local_rank = parsed;
  }
  absl::StatusOr<rdma::torch::RunScope> scope = rdma::torch::RunScope::FromEnvironment();
  if (!scope.ok()) return scope.status();
  options.store_scope = scope->prefix();
  return options;
}

std::string DeviceChoiceWarning(const BackendOptions& options, int current, int count) {
  if (current < 0 || count < 2 || options.local_rank < 0 || options.local_rank >= count ||
      options.local_rank == current) {
    return "";
  }
  return absl::StrCat("this rank's process group takes cuda:", current,
                      ", torch's current device, for its CUDA tensors, but LOCAL_RANK is ",
                      options.local_rank, ": call torch.cuda.set_device(", options.local_rank,
                      ") before init_process_group, or its tensors on cuda:",
                      options.local_rank, " will be refused");
}

}  // namespace rdmaflow::torch_backend
