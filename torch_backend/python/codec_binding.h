// File: codec_binding.h
// -----------------------------------------------------------------------------
// rdmaflow_torch.Codec: a gradient codec (compression/codec.h) for Python,
// over torch tensors: what rdmaflow_torch.hooks drives through
// torch.distributed's collectives.
//
//   codec = rdmaflow_torch.Codec("topk:ratio=0.01", rank, world, numel, seed)
//   r = codec.begin(gradient, step)   # (exchange, dtype, offset, bytes)
//   while r is not None:
//       ... exchange codec.scratch[offset:offset + bytes] ...
//       r = codec.next(gathered, out, 1.0 / world)
//
// Errors: ValueError for a bad spec or tensor, RuntimeError for a peer's
// message or value that does not fit (kDataLoss), with the codec's message.
#ifndef RDMAFLOW_TORCH_BACKEND_PYTHON_CODEC_BINDING_H_
#define RDMAFLOW_TORCH_BACKEND_PYTHON_CODEC_BINDING_H_

#include <pybind11/pybind11.h>

namespace rdmaflow::torch_backend {

// Adds class Codec and validate_codec(spec) to `module`.
void BindCodec(pybind11::module_& module);

}  // namespace rdmaflow::torch_backend

#endif  // RDMAFLOW_TORCH_BACKEND_PYTHON_CODEC_BINDING_H_
