// The reduction kernel of the CUDA device runtime (reduce_kernels.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "reduce_kernels.h"

namespace rdmaflow::device::cuda {
namespace {

struct Sources {
  const void* at[kMaxKernelSources];
};

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// One element per thread per pass, over a grid-stride loop. The sources
// are read in order and the comparison for max is the host's
// (v > acc ? v : acc), so both devices agree bit for bit on every value
// but a NaN: the GPU's arithmetic gives its one canonical NaN, the CPU's
// keeps a NaN's sign and payload.
template <typename T, bool kSum>
__global__ void ReduceKernel(T* dst, Sources srcs, int sources, size_t count) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    float acc = ToFloat(static_cast<const T*>(srcs.at[0])[i]);
    for (int s = 1; s < sources; ++s) {
      const float v = ToFloat(static_cast<const T*>(srcs.at[s])[i]);
      acc = kSum ? acc + v : (v > acc ? v : acc);
    }
    dst[i] = FromFloat<T>(acc);
  }
}

template <typename T>
int Launch(KernelOp op, void* dst, const Sources& srcs, int sources, size_t count,
           cudaStream_t stream) {
  constexpr int kThreads = 256;
  // Enough blocks to fill the GPU several times over, no more: the loop
  // strides over the rest.
  const size_t blocks = std::min<size_t>((count + kThreads - 1) / kThreads, 132 * 16);
  if (op == KernelOp::kSum) {
    ReduceKernel<T, true><<<blocks, kThreads, 0, stream>>>(static_cast<T*>(dst), srcs, sources,
                                                           count);
  } else {
    ReduceKernel<T, false><<<blocks, kThreads, 0, stream>>>(static_cast<T*>(dst), srcs, sources,
                                                            count);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int LaunchReduce(KernelType type, KernelOp op, void* dst, const void* const* srcs, int sources,
                 size_t count, void* stream) {
  if (sources < 1 || sources > kMaxKernelSources) return static_cast<int>(cudaErrorInvalidValue);
  if (count == 0) return 0;
  Sources packed{};
  for (int s = 0; s < sources; ++s) packed.at[s] = srcs[s];
  auto* on = static_cast<cudaStream_t>(stream);
  // A launch reports through cudaGetLastError, which also holds any earlier
  // runtime call's failure on this thread (an expected one, such as
  // cudaHostUnregister of memory never pinned): drop that first, or it
  // would be taken for this launch's.
  (void)cudaGetLastError();
  switch (type) {
    case KernelType::kFloat32:
      return Launch<float>(op, dst, packed, sources, count, on);
    case KernelType::kFloat16:
      return Launch<__half>(op, dst, packed, sources, count, on);
    case KernelType::kBFloat16:
      return Launch<__nv_bfloat16>(op, dst, packed, sources, count, on);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace rdmaflow::device::cuda
