// File: data_mover.h
// -----------------------------------------------------------------------------
// DataMover: what a direct-access collective (HostAllReduce) does with the
// bytes, apart from its control words. The protocol (who reads which peer's
// range when, which word says so) does not depend on where the bytes lie;
// only how they are copied and reduced does:
//
//   host memory     memcpy and the host kernel (collectives/reduce.h), done
//                   when the call returns (HostDataMover, the default);
//   device memory   copies and reduce launches on a device stream, done
//                   once an event says so (collectives/device_data_mover.h).
//
// So the rule for a protocol: after Copy/Reduce, call Fence before
// publishing a word that tells a peer the bytes are there (or that we are
// done reading the peer's), and before returning to the caller.
//
// A peer's data region is reached through MapPeer: the host mover maps it
// with Endpoint::MapRemote (host loads and stores), the device mover with
// an IPC mapping (device pointers, for its stream only).
//
// Thread-compatible: the collective's thread.
#ifndef RDMAFLOW_COLLECTIVES_DATA_MOVER_H_
#define RDMAFLOW_COLLECTIVES_DATA_MOVER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "collectives/reduce.h"
#include "rdma/endpoint.h"
#include "rdma/remote_region.h"

namespace rdmaflow::collectives {

class DataMover {
 public:
  virtual ~DataMover() = default;

  // "host" or "device": the members' layouts must agree on it.
  virtual const char* kind() const = 0;
  // "host memory", "device memory of cuda:0 (...)": for errors.
  virtual std::string Describe() const = 0;

  // OK when Reduce takes `type` and `op`; else kInvalidArgument saying
  // what it takes (every member then refuses the call alike).
  virtual absl::Status Supports(DataType type, ReduceOp op) const = 0;

  // Where `remote` (the whole of a peer's data region) lies for this
  // mover's operations. The endpoint's errors (kUnimplemented: it cannot
  // map that peer's memory).
  virtual absl::StatusOr<std::byte*> MapPeer(rdma::Endpoint& endpoint,
                                             const rdma::RemoteSlice& remote) = 0;

  // `bytes` of memory of this mover's kind, owned by it, valid until the
  // next call of Scratch or the mover's end.
  virtual absl::StatusOr<std::byte*> Scratch(size_t bytes) = 0;

  // Copies `bytes` from `src` to `dst` (no overlap).
  virtual absl::Status Copy(std::byte* dst, const std::byte* src, size_t bytes) = 0;

  // dst[i] = op(srcs[0][i], ..., srcs[n-1][i]) for i < count, folded in
  // the order of `srcs` (every member then gets the same bits). `dst` may
  // be srcs[0]; no other overlap. At least one source.
  virtual absl::Status Reduce(DataType type, ReduceOp op, std::byte* dst,
                              const std::vector<const std::byte*>& srcs, size_t count) = 0;

  // A point after every Copy and Reduce so far; Reached(mark) says, without
  // waiting, whether everything before it has landed (marks are reached in
  // order), or gives the error of an operation that failed. A protocol
  // enqueues several pieces, each with its mark, and publishes each piece
  // as its mark is reached.
  virtual absl::StatusOr<uint64_t> Mark() = 0;
  virtual absl::StatusOr<bool> Reached(uint64_t mark) = 0;

  // Returns once every Copy and Reduce before it has landed, or fails with
  // kDeadlineExceeded at `deadline` (naming `what`), or with the error of
  // an operation that failed.
  virtual absl::Status Fence(absl::Time deadline, const std::string& what) = 0;
};

// Polls `reached` until it holds (common/poll_until.h: at once a few
// times, a device's short kernels end within microseconds, then naps of
// 2 us doubling to 20 us with the timer slack narrowed). kDeadlineExceeded
// saying `what` did not finish once `deadline` passes; `reached`'s own
// error.
absl::Status PollUntil(absl::FunctionRef<absl::StatusOr<bool>()> reached, absl::Time deadline,
                       absl::string_view what);

// Host memory: every operation is done when it returns; Fence is free.
class HostDataMover final : public DataMover {
 public:
  const char* kind() const override { return "host"; }
  std::string Describe() const override { return "host memory"; }
  absl::Status Supports(DataType, ReduceOp) const override { return absl::OkStatus(); }
  absl::StatusOr<std::byte*> MapPeer(rdma::Endpoint& endpoint,
                                     const rdma::RemoteSlice& remote) override;
  absl::StatusOr<std::byte*> Scratch(size_t bytes) override;
  absl::Status Copy(std::byte* dst, const std::byte* src, size_t bytes) override;
  absl::Status Reduce(DataType type, ReduceOp op, std::byte* dst,
                      const std::vector<const std::byte*>& srcs, size_t count) override;
  absl::StatusOr<uint64_t> Mark() override { return ++marks_; }
  absl::StatusOr<bool> Reached(uint64_t) override { return true; }
  absl::Status Fence(absl::Time, const std::string&) override { return absl::OkStatus(); }

 private:
  std::vector<std::byte> scratch_;
  uint64_t marks_ = 0;
};

}  // namespace rdmaflow::collectives

#endif  // RDMAFLOW_COLLECTIVES_DATA_MOVER_H_
