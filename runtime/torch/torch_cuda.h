// File: torch_cuda.h
// -----------------------------------------------------------------------------
// LoadTorchCuda: CUDA for LibTorch in a program that links only its CPU
// library (rdmaflow's binaries link libtorch_cpu, so that none pulls the
// CUDA libraries in): loads torch's libtorch_cuda.so, which registers CUDA
// with torch (its allocator, streams, kernels), once per process. Used by
// `rdmaflow_train --device cuda` and the tests that run on a GPU.
#ifndef RDMAFLOW_RUNTIME_TORCH_TORCH_CUDA_H_
#define RDMAFLOW_RUNTIME_TORCH_TORCH_CUDA_H_

#include "absl/status/status.h"

namespace rdmaflow::runtime::torch {

// OK once torch sees a GPU; kUnavailable naming why not (the library
// missing beside libtorch_cpu, or no device: no driver); kFailedPrecondition
// where the process asked ATen about CUDA before (torch::manual_seed does):
// call it before any torch call. Thread-safe; the first call's answer is
// every call's.
absl::Status LoadTorchCuda();

}  // namespace rdmaflow::runtime::torch

#endif  // RDMAFLOW_RUNTIME_TORCH_TORCH_CUDA_H_
