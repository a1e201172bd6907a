// File: waits.h
// -----------------------------------------------------------------------------
// Blocking helpers on a transport's ProgressLoop: a write, read or flush
// posted and waited for, and a store barrier, each waiting through the loop
// (its other protocols' handlers keep running, its wait policy applies) on
// rdma/blocking.h's core, PostAndWait(). Giving up after posting follows
// rdma/blocking.h: the operation is ended before the helper returns. By
// default by closing its endpoint; a protocol on links it shares with others
// passes a fence of its own (PeerLinks::Fence: wait for the operation, sever
// the peer only if it hangs), so one protocol's timeout never closes a lane
// another one uses.
//
//   RETURN_IF_ERROR(onesided::Write(loop, *lane, src, dst, std::nullopt, deadline));
//   RETURN_IF_ERROR(onesided::Barrier(loop, store, ns, "done", world, timeout));
#ifndef RDMAFLOW_ONESIDED_PROGRESS_WAITS_H_
#define RDMAFLOW_ONESIDED_PROGRESS_WAITS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "onesided/progress/progress_loop.h"
#include "rdma/endpoint.h"
#include "rdma/slice.h"
#include "rdma/store.h"

namespace rdmaflow::onesided {

// Ends an operation whose wait failed (rdma::FenceFn): given whether it has
// finished, it makes it end (or lets it run out) within rdma::kCancelGrace,
// and says what it did. Null: close the endpoint and drain the loop.
using Fence = std::function<std::string(absl::FunctionRef<bool()> finished)>;

// rdma/blocking.h's Write, Read and Flush, waiting through `loop` (whose
// transport owns `endpoint`), fenced by `fence`.
absl::Status Write(ProgressLoop& loop, rdma::Endpoint& endpoint, const rdma::LocalSlice& src,
                   const rdma::RemoteSlice& dst, std::optional<uint32_t> notification,
                   absl::Time deadline, const Fence& fence = nullptr);
absl::Status Read(ProgressLoop& loop, rdma::Endpoint& endpoint, const rdma::LocalSlice& dst,
                  const rdma::RemoteSlice& src, absl::Time deadline,
                  const Fence& fence = nullptr);
absl::Status Flush(ProgressLoop& loop, rdma::Endpoint& endpoint, absl::Time deadline,
                   const Fence& fence = nullptr);

// rdma::Barrier, progressing `loop` between reads of the count.
absl::Status Barrier(ProgressLoop& loop, rdma::Store& store, absl::string_view ns,
                     absl::string_view name, int world_size, absl::Duration timeout);

}  // namespace rdmaflow::onesided

#endif  // RDMAFLOW_ONESIDED_PROGRESS_WAITS_H_
