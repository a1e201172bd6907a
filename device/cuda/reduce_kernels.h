// File: reduce_kernels.h
// -----------------------------------------------------------------------------
// The device reduction kernel (reduce_kernels.cu), callable from code that
// includes no CUDA header: dst[i] = op(srcs[0][i], ..., srcs[n-1][i]),
// accumulated in float32 and rounded once (round to nearest even), as the
// fake device computes it.
#ifndef RDMAFLOW_DEVICE_CUDA_REDUCE_KERNELS_H_
#define RDMAFLOW_DEVICE_CUDA_REDUCE_KERNELS_H_

#include <cstddef>

namespace rdmaflow::device::cuda {

enum class KernelType { kFloat32, kFloat16, kBFloat16 };
enum class KernelOp { kSum, kMax };
constexpr int kMaxKernelSources = 8;

// Enqueues the reduction on `stream` (a cudaStream_t). The cudaError_t of
// the launch, as an int (0: launched).
int LaunchReduce(KernelType type, KernelOp op, void* dst, const void* const* srcs, int sources,
                 size_t count, void* stream);

}  // namespace rdmaflow::device::cuda

#endif  // RDMAFLOW_DEVICE_CUDA_REDUCE_KERNELS_H_
