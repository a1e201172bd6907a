// File: waits.cc
#include "onesided/progress/waits.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "rdma/blocking.h"
#include "rdma/rendezvous.h"

namespace rdmaflow::onesided {
namespace {

absl::Status OnLoop(ProgressLoop& loop, rdma::Endpoint& endpoint,
                    absl::FunctionRef<absl::Status(rdma::Completion)> post, absl::Time deadline,
                    const std::string& what, const Fence& fence) {
  return rdma::PostAndWait(
      endpoint, loop.transport().rank(), post, deadline, what,
      [&](absl::FunctionRef<bool()> done, absl::Time until, absl::string_view waiting) {
        return loop.WaitFor(done, until, waiting);
      },
      [&](absl::FunctionRef<bool()> finished) -> std::string {
        if (fence) return fence(finished);
        return rdma::CloseAndDrain(endpoint, finished,
                                   [&](absl::FunctionRef<bool()> done, absl::Time until) {
                                     return loop.Drain(done, until);
                                   });
      });
}

}  // namespace

absl::Status Write(ProgressLoop& loop, rdma::Endpoint& endpoint, const rdma::LocalSlice& src,
                   const rdma::RemoteSlice& dst, std::optional<uint32_t> notification,
                   absl::Time deadline, const Fence& fence) {
  return OnLoop(
      loop, endpoint,
      [&](rdma::Completion done) {
        return endpoint.PostWrite(src, dst, notification, std::move(done));
      },
      deadline, absl::StrCat("a write to rank ", endpoint.peer_rank()), fence);
}

absl::Status Read(ProgressLoop& loop, rdma::Endpoint& endpoint, const rdma::LocalSlice& dst,
                  const rdma::RemoteSlice& src, absl::Time deadline, const Fence& fence) {
  return OnLoop(
      loop, endpoint,
      [&](rdma::Completion done) { return endpoint.PostRead(dst, src, std::move(done)); },
      deadline, absl::StrCat("a read from rank ", endpoint.peer_rank()), fence);
}

absl::Status Flush(ProgressLoop& loop, rdma::Endpoint& endpoint, absl::Time deadline,
                   const Fence& fence) {
  return OnLoop(
      loop, endpoint, [&](rdma::Completion done) { return endpoint.PostFlush(std::move(done)); },
      deadline, absl::StrCat("a flush to rank ", endpoint.peer_rank()), fence);
}

absl::Status Barrier(ProgressLoop& loop, rdma::Store& store, absl::string_view ns,
                     absl::string_view name, int world_size, absl::Duration timeout) {
  const std::string what = absl::StrCat("barrier '", name, "'");
  return rdma::Barrier(store, ns, name, world_size, timeout, [&](absl::Time until) {
    return loop.WaitFor([&] { return absl::Now() >= until; }, until + timeout, what);
  });
}

}  // namespace rdmaflow::onesided
