// File: tensor_collectives.h
// -----------------------------------------------------------------------------
// The rdmaflow backend's operations on LibTorch tensors, run on the engine
// thread: they map tensors onto the engine's ring all-reduce, direct
// collectives and Messenger, copying only what must be copied (a
// non-contiguous tensor once, an unregistered one through staging for the
// all-reduce), and counting it. Arguments are checked by the caller
// (process_group_rdmaflow.cc); what only the ranks together can check
// (same sizes and types everywhere) is checked here.
#ifndef RDMAFLOW_TORCH_BACKEND_TENSOR_COLLECTIVES_H_
#define RDMAFLOW_TORCH_BACKEND_TENSOR_COLLECTIVES_H_

#include <ATen/core/Tensor.h>

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/reduce.h"
#include "torch_backend/engine.h"
#include "torch_backend/tensor_types.h"
#include "torch_backend/work.h"

namespace rdmaflow::torch_backend {

// In place. Every rank must pass the same dtype, number of elements and
// operator (kInvalidArgument naming the rank that differs).
absl::Status AllReduceTensor(Engine& engine, at::Tensor& tensor, collectives::DataType type,
                             Reduction reduction);

// A contiguous device tensor of the group's device, on the device
// (DeviceAllReduce), once the caller's stream has reached the call; an
// average is the sum divided by the ranks there.
absl::Status DeviceAllReduceTensor(Engine& engine, at::Tensor& tensor,
                                   collectives::DataType type, Reduction reduction);

// The flat all-gather and reduce-scatter FSDP calls (_allgather_base,
// _reduce_scatter_base) of contiguous device tensors of the group's device,
// on the device through DeviceAllReduce, once the caller's stream has
// reached the call. The all-gather is a sum of the output with every other
// rank's part filled with -0.0 (x + -0.0 is x, bit for bit, for every x
// but a NaN, which a GPU makes its canonical NaN); the reduce-scatter an
// all-reduce of which this rank keeps its part, divided by the ranks for
// an average. Types and operators DeviceAllReduce::Takes. A failure before
// the collective gives the device all-reduce up (DeviceAllReduce::Abandon),
// so that the peers' calls fail at once.
absl::Status DeviceAllGatherTensor(Engine& engine, const at::Tensor& input,
                                   at::Tensor& output, collectives::DataType type);
absl::Status DeviceReduceScatterTensor(Engine& engine, const at::Tensor& input,
                                       at::Tensor& output, collectives::DataType type,
                                       Reduction reduction);

// The list forms of the two, and the reduce to a root, for contiguous
// device tensors of the group's device (the lists of one tensor per rank):
// the flat calls above on a flat tensor of the device (TensorDevice::Empty)
// that the list is copied into or out of on the device, as NCCL's backend
// does; the reduce an all-reduce of which the root keeps the result (the
// others' tensors left as they were). Counted as the flat calls are, and
// the reduce as device_allreduces. Types and operators
// DeviceAllReduce::Takes (a sum for the all-gather). A failure before the
// collective gives the device all-reduce up, as above.
absl::Status DeviceAllGatherListTensors(Engine& engine, const at::Tensor& input,
                                        std::vector<at::Tensor>& outputs,
                                        collectives::DataType type);
absl::Status DeviceReduceScatterListTensors(Engine& engine, const std::vector<at::Tensor>& inputs,
                                            at::Tensor& output, collectives::DataType type,
                                            Reduction reduction);
absl::Status DeviceReduceTensor(Engine& engine, at::Tensor& tensor, int root,
                                collectives::DataType type, Reduction reduction);

// The broadcast of a contiguous device tensor of the group's device, on the
// device (DDP's broadcasts of its parameters and buffers), counted as
// device_broadcasts:
//   - DeviceBroadcastTensor, every rank on one host
//     (DeviceAllReduce::copies_broadcasts()): the root's bytes copied to
//     the others through its region, any dtype, bit for bit;
//   - DeviceSumBroadcastTensor, elsewhere: the same way as the all-gather,
//     the root's values summed with -0.0 from every other rank; types
//     DeviceAllReduce::Takes for a sum. Abandon as above.
absl::Status DeviceBroadcastTensor(Engine& engine, at::Tensor& tensor, int root);
absl::Status DeviceSumBroadcastTensor(Engine& engine, at::Tensor& tensor, int root,
                                      collectives::DataType type);

absl::Status BroadcastTensor(Engine& engine, at::Tensor& tensor, int root);

// For benchmarks: `iterations` float32 sums of `tensor` (in the registered
// pool) by the ring's all-reduce itself, back to back, with none of the
// backend's work around each call; the time per call. Every rank must
// call it with the same count. kInvalidArgument for a tensor that is not
// a contiguous float32 tensor of the registered pool, or a group of one.
absl::StatusOr<absl::Duration> TimeBareAllReduce(Engine& engine, const at::Tensor& tensor,
                                                 int iterations);

// The root's tensor = reduction over the ranks' tensors (rank order);
// other ranks' tensors are left as they were.
absl::Status ReduceTensor(Engine& engine, at::Tensor& tensor, int root,
                          collectives::DataType type, Reduction reduction);

// At the root, outputs[r] = rank r's input (outputs is empty elsewhere).
absl::Status GatherTensors(Engine& engine, const at::Tensor& input,
                           std::vector<at::Tensor>& outputs, int root);

// output = the root's inputs[this rank] (inputs is empty off the root).
absl::Status ScatterTensors(Engine& engine, const std::vector<at::Tensor>& inputs,
                            at::Tensor& output, int root);

// outputs[r] = rank r's input.
absl::Status AllGatherTensors(Engine& engine, const at::Tensor& input,
                              std::vector<at::Tensor>& outputs);

// output = reduction over ranks r of rank r's inputs[this rank].
absl::Status ReduceScatterTensors(Engine& engine, const std::vector<at::Tensor>& inputs,
                                  at::Tensor& output, collectives::DataType type,
                                  Reduction reduction);

// outputs[r] = rank r's inputs[this rank]. The lists have one tensor per
// rank; a part whose size differs from what its sender sends is
// kInvalidArgument naming the sender.
absl::Status AllToAllTensors(Engine& engine, const std::vector<at::Tensor>& inputs,
                             std::vector<at::Tensor>& outputs);

// Every tensor all-reduced, as one all-reduce of all of them laid end to
// end (one copy in and one out, counted as coalesced_bytes). They share
// one dtype; every rank passes the same list of sizes.
absl::Status AllReduceCoalescedTensors(Engine& engine, std::vector<at::Tensor>& tensors,
                                       collectives::DataType type, Reduction reduction);

// The same for contiguous device tensors of the group's device, on the
// device (a flat device tensor, as DeviceAllGatherListTensors), of the
// types and operators DeviceAllReduce::Takes; counted as a device
// all-reduce and coalesced_bytes.
absl::Status DeviceAllReduceCoalescedTensors(Engine& engine, std::vector<at::Tensor>& tensors,
                                             collectives::DataType type, Reduction reduction);

// outputs[r][i] = rank r's inputs[i], as one all-gather of the inputs laid
// end to end (counted as coalesced_bytes). They share one dtype.
absl::Status AllGatherCoalescedTensors(Engine& engine, const std::vector<at::Tensor>& inputs,
                                       std::vector<std::vector<at::Tensor>>& outputs);

// Point-to-point posts: `work` completes when the message has landed at
// `peer` (send) or has been received into `tensor` (recv).
// Returns the Messenger's operation, which the engine abandons at its
// deadline.
absl::StatusOr<onesided::Messenger::OpId> PostSend(
    Engine& engine, const at::Tensor& tensor, int peer, int tag,
    const c10::intrusive_ptr<RdmaflowWork>& work);
absl::StatusOr<onesided::Messenger::OpId> PostRecv(
    Engine& engine, const at::Tensor& tensor, int peer, int tag,
    const c10::intrusive_ptr<RdmaflowWork>& work);

// The same for a contiguous device tensor of the group's device, device to
// device (Engine::device_p2p(), DeviceP2p): the send's `work` completes
// when the receiver answered that it has the tensor (which stays
// referenced until then), the receive's once the tensor is in place and
// answered for. Counted as device_p2p_ipc, or device_p2p_inline and
// device_staged_bytes where the sender's memory does not export. The
// operation returned is the one the engine abandons at its deadline (the
// send's wait for the answer).
absl::StatusOr<onesided::Messenger::OpId> PostDeviceSend(
    Engine& engine, const at::Tensor& tensor, int peer, int tag,
    const c10::intrusive_ptr<RdmaflowWork>& work);
absl::StatusOr<onesided::Messenger::OpId> PostDeviceRecv(
    Engine& engine, const at::Tensor& tensor, int peer, int tag,
    const c10::intrusive_ptr<RdmaflowWork>& work);

// outputs[r] = rank r's inputs[this rank], contiguous device tensors of the
// group's device, device to device (Engine::device_p2p()): each part to
// another rank goes as a send and a receive of a device tensor (above),
// this rank's own is copied on the device; returns once every part has
// landed and been answered for (so the inputs may change), or the first
// error; at the group's deadline what is left is given up. A part whose
// size differs from what its sender sends is kInvalidArgument naming the
// sender. Counted as device_alltoalls (and each part as above).
absl::Status DeviceAllToAllTensors(Engine& engine, const std::vector<at::Tensor>& inputs,
                                   std::vector<at::Tensor>& outputs);

// Gather and scatter at `root` the same way (the root's own part copied on
// the device), counted as device_gathers and device_scatters.
absl::Status DeviceGatherTensors(Engine& engine, const at::Tensor& input,
                                 std::vector<at::Tensor>& outputs, int root);
absl::Status DeviceScatterTensors(Engine& engine, const std::vector<at::Tensor>& inputs,
                                  at::Tensor& output, int root);

}  // namespace rdmaflow::torch_backend

#endif  // RDMAFLOW_TORCH_BACKEND_TENSOR_COLLECTIVES_H_
