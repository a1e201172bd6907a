// End to end: the rdmaflow c10d process group between OS processes over
// UCX shared memory, rendezvous through c10d's TCPStore (as under torchrun).
// With 2 and 4 ranks, every collective against a reference computed
// locally (reduce, gather and scatter from every root too), from 0 elements
// to 16 MiB (pieces through a 4 MiB staging area),
// float32/float64/int32/int64; every reduce op; non-contiguous and
// registered tensors and ordinary ones read by the peers with
// process_vm_readv (counted); send/recv with tags received out of order;
// mismatched sizes and bad arguments as errors on the Work. A rank killed
// mid-job: its peers' next collective fails on the Work instead of hanging.
// Slow peers (the `slow_peer` suite, target torch_backend_slow_peer_test):
// a collective that times out waiting on a straggler names it and lets go
// of its buffers (the straggler's late message never lands in them); an
// unmatched receive fails at the group's timeout; destroying a group with
// a receive pending returns; an exception on the engine thread fails the
// Work instead of ending the process. Inline calls (RDMAFLOW_INLINE_KB): one
// thread's small all-reduces beside another thread's send/recv ping-pong, in
// the same group, every result exact.
// The test binary re-executes itself per rank (launch/ranks_or_tests_main.h).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "collectives/shared_segments.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launch/launcher.h"
#include "launch/ranks_or_tests_main.h"
#include "rdma/torch/tcp_store.h"
#include "tests/torch_backend_test_util.h"
#include "torch_backend/process_group_rdmaflow.h"

namespace rdmaflow {
namespace {

using torch_backend::ProcessGroupRdmaflow;

constexpr char kCaseEnv[] = "RDMAFLOW_PG_TEST_CASE";

using testing::AllRanksUp;
using testing::Check;
using testing::Values;
using testing::Wait;

absl::Status CheckEqual(const at::Tensor& got, const at::Tensor& expected,
                        const std::string& what) {
  return Check(got.scalar_type() == expected.scalar_type() && at::equal(got, expected),
               absl::StrCat(what, ": result differs from the local reference"));
}

absl::Status AllReduces(ProcessGroupRdmaflow& pg, int rank, int world) {
  const std::vector<int64_t> sizes = {0, 1, 1000, 65537, int64_t{4} << 20};  // 16 MiB fp32
  for (at::ScalarType dtype : {at::kFloat, at::kDouble, at::kInt, at::kLong}) {
    for (int64_t n : sizes) {
      if (n > 65537 && (dtype == at::kDouble || dtype == at::kInt)) continue;
      at::Tensor reference = Values(0, n, dtype);
      for (int r = 1; r < world; ++r) reference += Values(r, n, dtype);
      std::vector<at::Tensor> tensors = {Values(rank, n, dtype)};
      RETURN_IF_ERROR(Wait(pg.allreduce(tensors)));
      RETURN_IF_ERROR(CheckEqual(tensors[0], reference,
                                 absl::StrCat("allreduce sum ", c10::toString(dtype), " x", n)));
    }
  }
  // The other ops.
  const int64_t n = 5000;
  struct OpCase {
    c10d::ReduceOp::RedOpType op;
    const char* name;
  };
  for (OpCase c : {OpCase{c10d::ReduceOp::MAX, "max"}, OpCase{c10d::ReduceOp::MIN, "min"},
                   OpCase{c10d::ReduceOp::PRODUCT, "product"},
                   OpCase{c10d::ReduceOp::AVG, "avg"}}) {
    for (at::ScalarType dtype : {at::kFloat, at::kLong}) {
      if (c.op == c10d::ReduceOp::AVG && dtype == at::kLong) continue;
      auto input = [&](int r) {
        // Products of values in {-1, 1, 2} stay small.
        return c.op == c10d::ReduceOp::PRODUCT
                   ? (Values(r, n, at::kLong) % 3 - 1).clamp_min(-1).masked_fill(
                         Values(r, n, at::kLong) % 3 == 1, 2).to(dtype)
                   : Values(r, n, dtype);
      };
      at::Tensor reference = input(0);
      for (int r = 1; r < world; ++r) {
        switch (c.op) {
          case c10d::ReduceOp::MAX: reference = at::maximum(reference, input(r)); break;
          case c10d::ReduceOp::MIN: reference = at::minimum(reference, input(r)); break;
          case c10d::ReduceOp::PRODUCT: reference = reference * input(r); break;
          default: reference = reference + input(r); break;
        }
      }
      if (c.op == c10d::ReduceOp::AVG) reference = reference / world;
      std::vector<at::Tensor> tensors = {input(rank)};
      c10d::AllreduceOptions options;
      options.reduceOp = c.op;
      RETURN_IF_ERROR(Wait(pg.allreduce(tensors, options)));
      RETURN_IF_ERROR(CheckEqual(tensors[0], reference,
                                 absl::StrCat("allreduce ", c.name, " ", c10::toString(dtype))));
    }
  }
  return absl::OkStatus();
}

// alltoall_base with uneven and with equal splits, and alltoall's lists
// (a non-contiguous output among them).
absl::Status AllToAlls(ProcessGroupRdmaflow& pg, int rank, int world) {
  // Rank s's part for rank d: (s + d + 1) * 10 rows of 3 floats.
  auto rows = [](int s, int d) { return int64_t{(s + d + 1) * 10}; };
  auto part = [&](int s, int d) {
    return Values(s, rows(s, d) * 3, at::kFloat, d).view({-1, 3});
  };
  std::vector<int64_t> in_splits, out_splits;
  std::vector<at::Tensor> in_parts, expected_parts;
  int64_t out_rows = 0;
  for (int peer = 0; peer < world; ++peer) {
    in_splits.push_back(rows(rank, peer));
    in_parts.push_back(part(rank, peer));
    out_splits.push_back(rows(peer, rank));
    expected_parts.push_back(part(peer, rank));
    out_rows += rows(peer, rank);
  }
  at::Tensor input = at::cat(in_parts);
  at::Tensor output = at::zeros({out_rows, 3}, at::kFloat);
  RETURN_IF_ERROR(Wait(pg.alltoall_base(output, input, out_splits, in_splits)));
  RETURN_IF_ERROR(CheckEqual(output, at::cat(expected_parts), "alltoall_base, uneven splits"));
  at::Tensor even_in = Values(rank, world * 8, at::kLong);
  at::Tensor even_out = at::zeros({world * 8}, at::kLong);
  std::vector<int64_t> equal;
  RETURN_IF_ERROR(Wait(pg.alltoall_base(even_out, even_in, equal, equal)));
  for (int peer = 0; peer < world; ++peer) {
    RETURN_IF_ERROR(CheckEqual(even_out.narrow(0, peer * 8, 8),
                               Values(peer, world * 8, at::kLong).narrow(0, rank * 8, 8),
                               absl::StrCat("alltoall_base, equal splits, from ", peer)));
  }
  std::vector<at::Tensor> ins, outs;
  for (int peer = 0; peer < world; ++peer) {
    ins.push_back(Values(rank, 600, at::kDouble, peer).view({20, 30}));
    // The last part arrives into a transposed (non-contiguous) view.
    outs.push_back(peer == world - 1 ? at::zeros({30, 20}, at::kDouble).t()
                                     : at::zeros({20, 30}, at::kDouble));
  }
  RETURN_IF_ERROR(Wait(pg.alltoall(outs, ins)));
  for (int peer = 0; peer < world; ++peer) {
    RETURN_IF_ERROR(CheckEqual(outs[peer].contiguous(),
                               Values(peer, 600, at::kDouble, rank).view({20, 30}),
                               absl::StrCat("alltoall from ", peer)));
  }
  return absl::OkStatus();
}

// allreduce_coalesced and allgather_coalesced: one call each over tensors
// of several shapes, laid end to end (counted).
absl::Status Coalesced(ProcessGroupRdmaflow& pg, int rank, int world) {
  const int64_t before = pg.stats().coalesced_bytes;
  std::vector<at::Tensor> grads = {Values(rank, 10, at::kFloat),
                                   Values(rank, 70000, at::kFloat, 1).view({700, 100})};
  RETURN_IF_ERROR(Wait(pg.allreduce_coalesced(grads)));
  for (size_t i = 0; i < grads.size(); ++i) {
    at::Tensor sum = at::zeros_like(grads[i]);
    for (int r = 0; r < world; ++r) {
      sum += Values(r, grads[i].numel(), at::kFloat, static_cast<int>(i)).view(grads[i].sizes());
    }
    RETURN_IF_ERROR(CheckEqual(grads[i], sum, absl::StrCat("allreduce_coalesced tensor ", i)));
  }
  std::vector<at::Tensor> mine = {Values(rank, 5, at::kInt), Values(rank, 3000, at::kInt, 1)};
  std::vector<std::vector<at::Tensor>> lists(world);
  for (int r = 0; r < world; ++r) {
    lists[r] = {at::zeros({5}, at::kInt), at::zeros({3000}, at::kInt)};
  }
  RETURN_IF_ERROR(Wait(pg.allgather_coalesced(lists, mine)));
  for (int r = 0; r < world; ++r) {
    RETURN_IF_ERROR(CheckEqual(lists[r][0], Values(r, 5, at::kInt),
                               absl::StrCat("allgather_coalesced from ", r, ", tensor 0")));
    RETURN_IF_ERROR(CheckEqual(lists[r][1], Values(r, 3000, at::kInt, 1),
                               absl::StrCat("allgather_coalesced from ", r, ", tensor 1")));
  }
  return Check(pg.stats().coalesced_bytes > before,
               "the coalesced calls' copies were not counted");
}

absl::Status OtherCollectives(ProcessGroupRdmaflow& pg, int rank, int world) {
  for (at::ScalarType dtype : {at::kFloat, at::kDouble, at::kInt, at::kLong}) {
    for (int64_t n : {int64_t{1}, int64_t{70000}, int64_t{1} << 20}) {
      const std::string what = absl::StrCat(c10::toString(dtype), " x", n);
      for (int root = 0; root < world; ++root) {
        std::vector<at::Tensor> tensors = {Values(rank, n, dtype, root)};
        c10d::BroadcastOptions options;
        options.rootRank = root;
        RETURN_IF_ERROR(Wait(pg.broadcast(tensors, options)));
        RETURN_IF_ERROR(CheckEqual(tensors[0], Values(root, n, dtype, root),
                                   absl::StrCat("broadcast from ", root, " ", what)));
      }
      std::vector<std::vector<at::Tensor>> gathered(1);
      for (int r = 0; r < world; ++r) gathered[0].push_back(at::zeros({n}, dtype));
      std::vector<at::Tensor> inputs = {Values(rank, n, dtype)};
      RETURN_IF_ERROR(Wait(pg.allgather(gathered, inputs)));
      for (int r = 0; r < world; ++r) {
        RETURN_IF_ERROR(CheckEqual(gathered[0][r], Values(r, n, dtype),
                                   absl::StrCat("allgather from ", r, " ", what)));
      }
      // Rank r's input block b: Values(r, n, dtype, b).
      std::vector<std::vector<at::Tensor>> blocks(1);
      for (int b = 0; b < world; ++b) blocks[0].push_back(Values(rank, n, dtype, b));
      std::vector<at::Tensor> output = {at::zeros({n}, dtype)};
      RETURN_IF_ERROR(Wait(pg.reduce_scatter(output, blocks)));
      at::Tensor reference = Values(0, n, dtype, rank);
      for (int r = 1; r < world; ++r) reference += Values(r, n, dtype, rank);
      RETURN_IF_ERROR(CheckEqual(output[0], reference, absl::StrCat("reduce_scatter ", what)));
    }
  }
  // Reduce, gather and scatter, to and from every root.
  for (int root = 0; root < world; ++root) {
    const std::string what = absl::StrCat(" with root ", root);
    std::vector<at::Tensor> tensors = {Values(rank, 5000, at::kLong)};
    c10d::ReduceOptions reduce;
    reduce.rootRank = root;
    reduce.reduceOp = c10d::ReduceOp::MAX;
    RETURN_IF_ERROR(Wait(pg.reduce(tensors, reduce)));
    at::Tensor expected = Values(rank, 5000, at::kLong);
    if (rank == root) {
      for (int r = 0; r < world; ++r) expected = at::maximum(expected, Values(r, 5000, at::kLong));
    }
    RETURN_IF_ERROR(CheckEqual(tensors[0], expected, "reduce" + what));
    std::vector<std::vector<at::Tensor>> gathered(rank == root ? 1 : 0);
    for (int r = 0; r < world && rank == root; ++r) {
      gathered[0].push_back(at::zeros({3000}, at::kDouble));
    }
    std::vector<at::Tensor> mine = {Values(rank, 3000, at::kDouble)};
    c10d::GatherOptions gather;
    gather.rootRank = root;
    RETURN_IF_ERROR(Wait(pg.gather(gathered, mine, gather)));
    for (int r = 0; r < world && rank == root; ++r) {
      RETURN_IF_ERROR(CheckEqual(gathered[0][r], Values(r, 3000, at::kDouble),
                                 absl::StrCat("gather from ", r, what)));
    }
    std::vector<std::vector<at::Tensor>> parts(rank == root ? 1 : 0);
    for (int r = 0; r < world && rank == root; ++r) {
      parts[0].push_back(Values(root, 3000, at::kInt, r));
    }
    std::vector<at::Tensor> part = {at::zeros({3000}, at::kInt)};
    c10d::ScatterOptions scatter;
    scatter.rootRank = root;
    RETURN_IF_ERROR(Wait(pg.scatter(part, parts, scatter)));
    RETURN_IF_ERROR(CheckEqual(part[0], Values(root, 3000, at::kInt, rank), "scatter" + what));
  }
  RETURN_IF_ERROR(AllToAlls(pg, rank, world));
  RETURN_IF_ERROR(Coalesced(pg, rank, world));
  // The flat variants.
  at::Tensor flat = at::zeros({world * 100}, at::kFloat);
  at::Tensor mine = Values(rank, 100, at::kFloat);
  RETURN_IF_ERROR(Wait(pg._allgather_base(flat, mine)));
  for (int r = 0; r < world; ++r) {
    RETURN_IF_ERROR(CheckEqual(flat.narrow(0, r * 100, 100), Values(r, 100, at::kFloat),
                               "_allgather_base"));
  }
  return Wait(pg.barrier());
}

absl::Status Layouts(ProcessGroupRdmaflow& pg, int rank, int world) {
  // Non-contiguous: a transposed matrix and a strided slice.
  at::Tensor matrix = Values(rank, 300 * 200, at::kFloat).reshape({300, 200});
  std::vector<at::Tensor> transposed = {matrix.t()};
  at::Tensor reference = Values(0, 300 * 200, at::kFloat).reshape({300, 200});
  for (int r = 1; r < world; ++r) reference += Values(r, 300 * 200, at::kFloat).reshape({300, 200});
  const int64_t before = pg.stats().noncontiguous_copies;
  RETURN_IF_ERROR(Wait(pg.allreduce(transposed)));
  RETURN_IF_ERROR(CheckEqual(matrix, reference, "allreduce of a transposed view"));
  at::Tensor strided_base = at::zeros({4000}, at::kLong);
  if (rank == 0) strided_base.copy_(Values(0, 4000, at::kLong));
  std::vector<at::Tensor> every_other = {strided_base.slice(0, 0, 4000, 2)};
  RETURN_IF_ERROR(Wait(pg.broadcast(every_other)));
  RETURN_IF_ERROR(CheckEqual(every_other[0], Values(0, 4000, at::kLong).slice(0, 0, 4000, 2),
                             "broadcast of a strided slice"));
  RETURN_IF_ERROR(Check(pg.stats().noncontiguous_copies >= before + 2,
                        "non-contiguous tensors were not counted"));
  // Registered tensors are reduced in place.
  ASSIGN_OR_RETURN(at::Tensor registered, pg.AllocateRegistered({1 << 20}, at::kFloat));
  registered.copy_(Values(rank, 1 << 20, at::kFloat));
  at::Tensor registered_reference = Values(0, 1 << 20, at::kFloat);
  for (int r = 1; r < world; ++r) registered_reference += Values(r, 1 << 20, at::kFloat);
  const torch_backend::BackendStats stats_before = pg.stats();
  std::vector<at::Tensor> in_place = {registered};
  RETURN_IF_ERROR(Wait(pg.allreduce(in_place)));
  RETURN_IF_ERROR(CheckEqual(registered, registered_reference, "registered allreduce"));
  const torch_backend::BackendStats stats_after = pg.stats();
  RETURN_IF_ERROR(Check(stats_after.zero_copy_allreduces == stats_before.zero_copy_allreduces + 1 &&
                            stats_after.staged_bytes == stats_before.staged_bytes,
                        "a registered tensor was staged"));
  // Ordinary contiguous tensors from RDMAFLOW_CMA_MIN_KB on are reduced in
  // place, the peers reading them out of this process: nothing staged,
  // also where another rank passes a registered one (odd ranks do).
  // Smaller ones are staged.
  // Where the ranks could not read each other's memory (a Yama
  // ptrace_scope of 1, a seccomp filter), they all stage, said once.
  const bool cma = pg.stats().single_copy_reads == 1;
  for (const bool mixed : {false, true}) {
    const bool ours_registered = mixed && rank % 2 == 1;
    at::Tensor ordinary = Values(rank, 1 << 18, at::kFloat);  // 1 MiB
    if (ours_registered) {
      ASSIGN_OR_RETURN(ordinary, pg.AllocateRegistered({1 << 18}, at::kFloat));
      ordinary.copy_(Values(rank, 1 << 18, at::kFloat));
    }
    at::Tensor ordinary_reference = Values(0, 1 << 18, at::kFloat);
    for (int r = 1; r < world; ++r) ordinary_reference += Values(r, 1 << 18, at::kFloat);
    const torch_backend::BackendStats before_ordinary = pg.stats();
    std::vector<at::Tensor> ordinary_list = {ordinary};
    RETURN_IF_ERROR(Wait(pg.allreduce(ordinary_list)));
    RETURN_IF_ERROR(CheckEqual(ordinary, ordinary_reference,
                               absl::StrCat("ordinary allreduce", mixed ? " (mixed)" : "")));
    const torch_backend::BackendStats after_ordinary = pg.stats();
    if (!ours_registered && cma) {
      RETURN_IF_ERROR(Check(
          after_ordinary.single_copy_allreduces == before_ordinary.single_copy_allreduces + 1 &&
              after_ordinary.single_copy_bytes == before_ordinary.single_copy_bytes + (4 << 18) &&
              after_ordinary.staged_bytes == before_ordinary.staged_bytes,
          absl::StrCat("rank ", rank, ": an ordinary 1 MiB tensor was staged")));
    } else if (!ours_registered) {
      std::fprintf(stderr, "rank %d: ordinary tensors staged: the ranks cannot read each "
                           "other's memory here (the backend said why)\n", rank);
    }
  }
  const torch_backend::BackendStats before_small = pg.stats();
  std::vector<at::Tensor> small = {Values(rank, 1000, at::kFloat)};
  RETURN_IF_ERROR(Wait(pg.allreduce(small)));
  RETURN_IF_ERROR(Check(pg.stats().staged_bytes == before_small.staged_bytes + 4000 &&
                            pg.stats().single_copy_allreduces ==
                                before_small.single_copy_allreduces,
                        "a small ordinary tensor was not staged"));
  return absl::OkStatus();
}

// RDMAFLOW_SHARED_TENSORS=on, from 64 KiB: ordinary tensors of that size
// on lie in shared segments. Each is reduced in place, nothing staged and
// nothing read out of a process: the peers map its segment once and read
// it where it lies, also in pieces (20 MiB through 4 MiB of staging) and
// again on the pool's reused segments. Then rank 1 passes private memory
// (read out of its process) beside the others' segments.
absl::Status SharedTensors(ProcessGroupRdmaflow& pg, int rank, int world) {
  if (pg.stats().single_copy_reads != 1) {
    std::fprintf(stderr, "rank %d: shared tensors not checked: the ranks cannot read each "
                         "other's memory here (the backend said why)\n", rank);
    return Check(pg.stats().shared_tensors == 0, "shared tensors on without the reads");
  }
  RETURN_IF_ERROR(Check(pg.stats().shared_tensors == 1, "the allocator is not installed"));
  // 16 KiB (below the threshold: staged), 64 KiB, 256 KiB, 4 MiB, 20 MiB.
  for (int64_t n : {int64_t{1} << 12, int64_t{1} << 14, int64_t{1} << 16, int64_t{1} << 20,
                    int64_t{5} << 20}) {
    for (int round = 0; round < 2; ++round) {
      at::Tensor tensor = Values(rank, n, at::kFloat) + round;
      at::Tensor reference = Values(0, n, at::kFloat) + round;
      for (int r = 1; r < world; ++r) reference += Values(r, n, at::kFloat) + round;
      const torch_backend::BackendStats before = pg.stats();
      std::vector<at::Tensor> tensors = {tensor};
      RETURN_IF_ERROR(Wait(pg.allreduce(tensors)));
      const std::string what = absl::StrCat("shared allreduce x", n, " round ", round);
      RETURN_IF_ERROR(CheckEqual(tensor, reference, what));
      const torch_backend::BackendStats after = pg.stats();
      const bool shared = n >= (int64_t{1} << 14);  // 64 KiB of float32
      RETURN_IF_ERROR(Check(
          after.shared_tensor_allreduces == before.shared_tensor_allreduces + (shared ? 1 : 0) &&
              after.single_copy_allreduces == before.single_copy_allreduces &&
              after.staged_bytes == before.staged_bytes + (shared ? 0 : 4 * n),
          absl::StrCat(what, shared ? ": not reduced in its segment" : ": not staged")));
    }
  }
  torch_backend::BackendStats stats = pg.stats();
  // The tensors' segments come back from the pool round after round.
  RETURN_IF_ERROR(Check(collectives::SharedSegments::Process().stats().reused > 0,
                        "no segment was reused"));
  RETURN_IF_ERROR(Check(stats.peer_segments_mapped >= world - 1 && stats.peer_segment_reads > 0 &&
                            stats.peer_segment_fallbacks == 0,
                        absl::StrCat("rank ", rank, ": ", stats.peer_segments_mapped,
                                     " segments mapped, ", stats.peer_segment_reads, " reads, ",
                                     stats.peer_segment_fallbacks, " fallbacks")));
  const int64_t n = int64_t{1} << 20;
  std::vector<float> own(rank == 1 ? n : 0);
  at::Tensor tensor = rank == 1 ? at::from_blob(own.data(), {n}, at::kFloat)
                                : at::empty({n}, at::kFloat);
  tensor.copy_(Values(rank, n, at::kFloat));
  at::Tensor reference = Values(0, n, at::kFloat);
  for (int r = 1; r < world; ++r) reference += Values(r, n, at::kFloat);
  const torch_backend::BackendStats before = pg.stats();
  std::vector<at::Tensor> tensors = {tensor};
  RETURN_IF_ERROR(Wait(pg.allreduce(tensors)));
  RETURN_IF_ERROR(CheckEqual(tensor, reference, "shared allreduce beside private memory"));
  stats = pg.stats();
  return Check(rank == 1 ? stats.single_copy_allreduces == before.single_copy_allreduces + 1 &&
                               stats.peer_segment_reads > before.peer_segment_reads
                         : stats.shared_tensor_allreduces == before.shared_tensor_allreduces + 1,
               absl::StrCat("rank ", rank, ": private memory beside segments miscounted"));
}

absl::Status PointToPoint(ProcessGroupRdmaflow& pg, int rank, int world) {
  // Pairs (0,1), (2,3): the even rank sends tags 1, 2, 3; the odd one
  // receives them 3, 2, 1, and each message differs in size.
  const int peer = rank ^ 1;
  if (peer >= world) return absl::OkStatus();
  if (rank % 2 == 0) {
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    std::vector<std::vector<at::Tensor>> messages;
    for (int tag : {1, 2, 3}) {
      messages.push_back({Values(rank, 1000 * tag + 77, at::kDouble, tag)});
      works.push_back(pg.send(messages.back(), peer, tag));
    }
    for (auto& work : works) RETURN_IF_ERROR(Wait(work));
  } else {
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    std::vector<std::vector<at::Tensor>> received;
    for (int tag : {3, 2, 1}) {
      received.push_back({at::zeros({1000 * tag + 77}, at::kDouble)});
      works.push_back(pg.recv(received.back(), peer, tag));
    }
    for (auto& work : works) RETURN_IF_ERROR(Wait(work));
    for (int i = 0; i < 3; ++i) {
      const int tag = 3 - i;
      RETURN_IF_ERROR(CheckEqual(received[i][0], Values(peer, 1000 * tag + 77, at::kDouble, tag),
                                 absl::StrCat("recv of tag ", tag)));
    }
  }
  return Wait(pg.barrier());
}

absl::Status Errors(ProcessGroupRdmaflow& pg, int rank, int world) {
  // Sizes that differ across ranks: an error on every rank, and the group
  // still works afterwards.
  std::vector<at::Tensor> mismatched = {at::ones({rank == 0 ? 10 : 20}, at::kFloat)};
  absl::Status status = Wait(pg.allreduce(mismatched));
  RETURN_IF_ERROR(Check(!status.ok() && absl::StrContains(status.message(), "all-reduces"),
                        absl::StrCat("mismatched allreduce: ", status.ToString())));
  std::vector<at::Tensor> two = {at::ones({3}), at::ones({3})};
  status = Wait(pg.allreduce(two));
  RETURN_IF_ERROR(Check(absl::StrContains(status.message(), "exactly one tensor"),
                        absl::StrCat("two tensors: ", status.ToString())));
  std::vector<at::Tensor> one = {at::ones({3}, at::kInt)};
  c10d::AllreduceOptions bxor;
  bxor.reduceOp = c10d::ReduceOp::BXOR;
  status = Wait(pg.allreduce(one, bxor));
  RETURN_IF_ERROR(Check(absl::StrContains(status.message(), "supports SUM"),
                        absl::StrCat("BXOR: ", status.ToString())));
  status = Wait(pg.send(one, rank, 0));
  RETURN_IF_ERROR(Check(absl::StrContains(status.message(), "itself"),
                        absl::StrCat("send to self: ", status.ToString())));
  // All-to-all splits that do not add up, or a part for itself whose two
  // sizes differ: refused here, before any rank waits.
  at::Tensor rows = at::zeros({4 * world}, at::kFloat);
  at::Tensor out = at::zeros({4 * world}, at::kFloat);
  std::vector<int64_t> short_splits(world, 3), none;
  status = Wait(pg.alltoall_base(out, rows, none, short_splits));
  RETURN_IF_ERROR(Check(absl::StrContains(status.message(), "summing to its"),
                        absl::StrCat("alltoall_base splits: ", status.ToString())));
  status = Wait(pg.alltoall_base(rows, rows, none, none));
  RETURN_IF_ERROR(Check(absl::StrContains(status.message(), "shares memory"),
                        absl::StrCat("alltoall_base in place: ", status.ToString())));
  std::vector<at::Tensor> ins(world, at::zeros({2})), outs(world, at::zeros({2}));
  outs[rank] = at::zeros({3});
  status = Wait(pg.alltoall(outs, ins));
  RETURN_IF_ERROR(Check(absl::StrContains(status.message(), "part for itself"),
                        absl::StrCat("alltoall self sizes: ", status.ToString())));
  std::vector<at::Tensor> mixed = {at::ones({2}, at::kFloat), at::ones({2}, at::kDouble)};
  status = Wait(pg.allreduce_coalesced(mixed));
  RETURN_IF_ERROR(Check(absl::StrContains(status.message(), "share one dtype"),
                        absl::StrCat("allreduce_coalesced dtypes: ", status.ToString())));
  std::vector<at::Tensor> fine = {at::full({7}, rank + 1.0f)};
  RETURN_IF_ERROR(Wait(pg.allreduce(fine)));
  return Check(fine[0].equal(at::full({7}, world * (world + 1) / 2.0f)),
               "allreduce after the errors");
}

// Over the ring (no direct access): each rank's tensor is reduced where it
// lies, with no agreement first: registered on some ranks (at offsets of
// their own), staged on others, larger than the staging area on all; then
// tensors whose sizes differ past the first piece are an error on every
// rank, after which the group is unusable (a ring's call that failed
// midway).
absl::Status RingPlaces(ProcessGroupRdmaflow& pg, int rank, int world) {
  const torch_backend::BackendStats before = pg.stats();
  for (int64_t n : {int64_t{1000}, int64_t{3} << 19}) {  // 6 MiB: 2 pieces of 4 MiB
    at::Tensor reference = Values(0, n, at::kFloat);
    for (int r = 1; r < world; ++r) reference += Values(r, n, at::kFloat);
    std::vector<at::Tensor> tensors;
    std::vector<at::Tensor> padding;  // moves rank 2's tensor along the pool
    if (rank == 2) {
      ASSIGN_OR_RETURN(at::Tensor pad, pg.AllocateRegistered({4096}, at::kFloat));
      padding.push_back(pad);
    }
    if (rank % 2 == 0) {
      ASSIGN_OR_RETURN(at::Tensor registered, pg.AllocateRegistered({n}, at::kFloat));
      tensors.push_back(registered.copy_(Values(rank, n, at::kFloat)));
    } else {
      tensors.push_back(Values(rank, n, at::kFloat));
    }
    RETURN_IF_ERROR(Wait(pg.allreduce(tensors)));
    RETURN_IF_ERROR(CheckEqual(tensors[0], reference,
                               absl::StrCat("ring all-reduce of ", n, " floats, ",
                                            rank % 2 == 0 ? "registered" : "staged")));
  }
  const torch_backend::BackendStats after = pg.stats();
  RETURN_IF_ERROR(Check(
      (after.zero_copy_allreduces - before.zero_copy_allreduces == 2) == (rank % 2 == 0),
      absl::StrCat("rank ", rank, ": ", after.zero_copy_allreduces - before.zero_copy_allreduces,
                   " zero-copy all-reduces")));
  // Sizes that differ only past the first piece (RDMAFLOW_STAGING_MB=4: 1 Mi
  // floats a piece): the last rank's tensor is one piece, the others' two,
  // so their first pieces match in count but not in being the last.
  const int64_t piece = int64_t{1} << 20;
  std::vector<at::Tensor> tensors = {at::ones({rank == world - 1 ? piece : piece + 500})};
  absl::Status mismatched = Wait(pg.allreduce(tensors));
  RETURN_IF_ERROR(Check(absl::StrContains(mismatched.message(), "differs between neighbours") ||
                            absl::StrContains(mismatched.message(), "gave up call"),
                        absl::StrCat("tensors that differ past the first piece: ",
                                     mismatched.ToString())));
  std::vector<at::Tensor> later = {at::ones({100})};
  absl::Status unusable = Wait(pg.allreduce(later));
  return Check(absl::StrContains(unusable.message(), "unusable"),
               absl::StrCat("an all-reduce after the mismatch: ", unusable.ToString()));
}

struct Joined {
  std::unique_ptr<rdma::torch::TcpStore> store;
  c10::intrusive_ptr<ProcessGroupRdmaflow> pg;
  int rank = 0;
  int world = 0;
};

absl::StatusOr<Joined> Join() {
  ASSIGN_OR_RETURN(rdma::torch::TcpStoreOptions options,
                   rdma::torch::TcpStoreOptions::FromEnvironment());
  Joined joined;
  joined.rank = options.rank;
  joined.world = options.world_size;
  ASSIGN_OR_RETURN(joined.store, rdma::torch::TcpStore::Create(options));
  // Every rank is up before the group starts (5 s timeout in some cases).
  RETURN_IF_ERROR(AllRanksUp(*joined.store->store(), joined.rank, joined.world));
  const char* timeout_s = std::getenv("RDMAFLOW_PG_TEST_TIMEOUT_S");
  ASSIGN_OR_RETURN(torch_backend::BackendOptions backend,
                   torch_backend::BackendOptions::FromEnvironment(
                       absl::Seconds(timeout_s == nullptr ? 60 : std::atoi(timeout_s))));
  ASSIGN_OR_RETURN(joined.pg, ProcessGroupRdmaflow::Create(joined.store->store(),
                                                           joined.rank, joined.world, backend));
  return joined;
}

// Every collective with rank 1 as a straggler: it joins only after rank 0
// has given up on it (rank 0's timeout is 5 s); the all-reduce also with
// registered tensors (same-host and ring algorithms) and coalesced, the
// all-to-all also as alltoall_base, from staged and registered tensors. Each collective gets a
// fresh group (a failed collective leaves a group unusable). Rank 0 must
// name rank 1 and the operation, and its buffers are its own again: the
// straggler's late messages (consumed before the receive of tag 9 that
// follows them) never land there. The straggler's own timeout is 2 s, so
// that its late collective (which may wait on rank 0 in vain) ends well
// within rank 0's wait for tag 9.
// The cases come in kStragglerParts parts (case i in part i % parts), each
// a test of its own, so that the test's shards wait out their timeouts side
// by side.
constexpr int kStragglerParts = 3;

absl::Status SlowCollective(Joined& joined, int part) {
  const int rank = joined.rank;
  ASSIGN_OR_RETURN(torch_backend::BackendOptions options,
                   torch_backend::BackendOptions::FromEnvironment(
                       rank == 0 ? absl::Seconds(5) : absl::Seconds(2)));
  joined.pg.reset();
  struct Case {
    const char* name;      // in rank 0's error
    std::function<c10::intrusive_ptr<c10d::Work>(ProcessGroupRdmaflow&,
                                                 std::vector<at::Tensor>&)>
        run;
    // The tensors lie in the registered pool (reduced in place, sent from
    // where they lie).
    bool registered = false;
    // No direct access: the ring, not the same-host algorithms.
    bool ring = false;
  };
  const int64_t n = 1000;
  auto pair = [&](std::vector<at::Tensor>& t) {
    return std::vector<at::Tensor>{t[0], t[1]};
  };
  const std::vector<Case> cases = {
      {"broadcast", [](ProcessGroupRdmaflow& pg, std::vector<at::Tensor>& t) {
         std::vector<at::Tensor> one = {t[0]};
         c10d::BroadcastOptions opts;
         opts.rootRank = 1;
         return pg.broadcast(one, opts);
       }},
      // The ring's agreement exchange, or (one host) the host path's entry:
      // both name the all-reduce.
      {"all-reduce", [](ProcessGroupRdmaflow& pg, std::vector<at::Tensor>& t) {
         std::vector<at::Tensor> one = {t[0]};
         return pg.allreduce(one);
       }},
      {"all-reduce", [](ProcessGroupRdmaflow& pg, std::vector<at::Tensor>& t) {
         std::vector<at::Tensor> one = {t[0]};
         return pg.allreduce(one);
       }, /*registered=*/true},
      {"all-reduce", [](ProcessGroupRdmaflow& pg, std::vector<at::Tensor>& t) {
         std::vector<at::Tensor> one = {t[0]};
         return pg.allreduce(one);
       }, /*registered=*/true, /*ring=*/true},
      {"all-reduce", [](ProcessGroupRdmaflow& pg, std::vector<at::Tensor>& t) {
         std::vector<at::Tensor> two = {t[0], t[1]};
         return pg.allreduce_coalesced(two);
       }},
      {"reduce", [](ProcessGroupRdmaflow& pg, std::vector<at::Tensor>& t) {
         std::vector<at::Tensor> one = {t[0]};
         return pg.reduce(one);
       }},
      {"all-gather", [&](ProcessGroupRdmaflow& pg, std::vector<at::Tensor>& t) {
         std::vector<std::vector<at::Tensor>> out = {pair(t)};
         std::vector<at::Tensor> in = {t[2]};
         return pg.allgather(out, in);
       }},
      {"gather", [&](ProcessGroupRdmaflow& pg, std::vector<at::Tensor>& t) {
         // Root 0: only it passes outputs.
         std::vector<std::vector<at::Tensor>> out;
         if (rank == 0) out.push_back(pair(t));
         std::vector<at::Tensor> in = {t[2]};
         return pg.gather(out, in);
       }},
      {"scatter", [&](ProcessGroupRdmaflow& pg, std::vector<at::Tensor>& t) {
         // Root 1 (the straggler): only it passes inputs.
         std::vector<std::vector<at::Tensor>> in;
         if (rank == 1) in.push_back(pair(t));
         std::vector<at::Tensor> out = {t[2]};
         c10d::ScatterOptions opts;
         opts.rootRank = 1;
         return pg.scatter(out, in, opts);
       }},
      {"reduce-scatter", [&](ProcessGroupRdmaflow& pg, std::vector<at::Tensor>& t) {
         std::vector<std::vector<at::Tensor>> in = {pair(t)};
         std::vector<at::Tensor> out = {t[2]};
         return pg.reduce_scatter(out, in);
       }},
      {"all-to-all", [&](ProcessGroupRdmaflow& pg, std::vector<at::Tensor>& t) {
         // Its parts for and from each rank: t[0] and t[1] in, t[2] and t[1]
         // out (the part for itself moves from t[rank] to itself's slot).
         std::vector<at::Tensor> in = pair(t);
         std::vector<at::Tensor> out = {rank == 0 ? t[0] : t[2], rank == 0 ? t[2] : t[1]};
         return pg.alltoall(out, in);
       }},
      {"all-to-all", [&](ProcessGroupRdmaflow& pg, std::vector<at::Tensor>& t) {
         std::vector<int64_t> even;  // n / 2 elements for each rank
         return pg.alltoall_base(t[2], t[0], even, even);
       }},
      {"all-to-all", [&](ProcessGroupRdmaflow& pg, std::vector<at::Tensor>& t) {
         // Sent from the registered pool, received into it.
         std::vector<int64_t> even;
         return pg.alltoall_base(t[2], t[0], even, even);
       }, /*registered=*/true},
      {"barrier", [](ProcessGroupRdmaflow& pg, std::vector<at::Tensor>&) {
         return pg.barrier();
       }},
  };
  if (part < 0 || part >= kStragglerParts) {
    return absl::InvalidArgumentError(absl::StrCat("no straggler part ", part));
  }
  for (size_t i = part; i < cases.size(); i += kStragglerParts) {
    const Case& c = cases[i];
    auto store = c10::make_intrusive<c10d::PrefixStore>(absl::StrCat("case", i),
                                                        joined.store->store());
    torch_backend::BackendOptions for_case = options;
    if (c.ring) for_case.direct = collectives::DirectAccess::kOff;
    ASSIGN_OR_RETURN(c10::intrusive_ptr<ProcessGroupRdmaflow> pg,
                     ProcessGroupRdmaflow::Create(store, rank, 2, for_case));
    std::vector<at::Tensor> t;
    for (int k = 0; k < 3; ++k) {
      if (c.registered) {
        ASSIGN_OR_RETURN(at::Tensor registered, pg->AllocateRegistered({n}, at::kFloat));
        t.push_back(registered.fill_(rank + 1.0f));
      } else {
        t.push_back(at::full({n}, rank + 1.0f));
      }
    }
    std::fprintf(stderr, "rank %d: case %zu: %s%s%s\n", rank, i, c.name,
                 c.registered ? ", registered tensors" : "", c.ring ? ", the ring" : "");
    if (rank == 1) {
      store->wait({"gave_up"}, std::chrono::seconds(60));
      // Its own outcome does not matter (rank 0 is gone from the
      // collective; a ring all-reduce would time out).
      absl::Status late = Wait(c.run(*pg, t));
      std::fprintf(stderr, "rank 1: late %s: %s\n", c.name, late.ToString().c_str());
      std::vector<at::Tensor> bye = {at::ones({4})};
      RETURN_IF_ERROR(Wait(pg->send(bye, 0, 9)));
    } else {
      absl::Status status = Wait(c.run(*pg, t));
      std::fprintf(stderr, "rank 0: %s: %s\n", c.name, status.ToString().c_str());
      RETURN_IF_ERROR(Check(absl::StrContains(status.message(), "timed out") &&
                                absl::StrContains(status.message(), "rank 1") &&
                                absl::StrContains(status.message(), c.name),
                            absl::StrCat("the straggler's ", c.name, ": ",
                                         status.ToString())));
      for (at::Tensor& tensor : t) tensor.fill_(-7.0f);
      store->set("gave_up", std::vector<uint8_t>{'1'});
      std::vector<at::Tensor> bye = {at::zeros({4})};
      RETURN_IF_ERROR(Wait(pg->recv(bye, 1, 9)));
      for (const at::Tensor& tensor : t) {
        RETURN_IF_ERROR(CheckEqual(tensor, at::full({n}, -7.0f),
                                   absl::StrCat("an abandoned ", c.name, "'s tensors")));
      }
      // Documented: the group is unusable after a failed collective.
      absl::Status later = Wait(pg->barrier());
      RETURN_IF_ERROR(Check(absl::StrContains(later.message(), "unusable"),
                            absl::StrCat("a collective after the timeout: ",
                                         later.ToString())));
    }
    const absl::Time start = absl::Now();
    pg.reset();
    std::fprintf(stderr, "rank %d: %s group destroyed in %s\n", rank, c.name,
                 absl::FormatDuration(absl::Now() - start).c_str());
  }
  return absl::OkStatus();
}

// Rank 0 receives what rank 1 never sends.
absl::Status PointToPointDeadline(Joined& joined) {
  c10d::Store& store = *joined.store->store();
  if (joined.rank == 1) {
    // Destroys its group as rank 0 does (the tear-down is collective).
    store.wait({"destroying"}, std::chrono::seconds(120));
    joined.pg.reset();
    return absl::OkStatus();
  }
  std::vector<at::Tensor> never = {at::zeros({10})};
  absl::Status status = Wait(joined.pg->recv(never, 1, 3));
  std::fprintf(stderr, "rank 0: recv: %s\n", status.ToString().c_str());
  RETURN_IF_ERROR(Check(absl::StrContains(status.message(), "receive from rank 1 (tag 3)") &&
                            absl::StrContains(status.message(), "did not complete within"),
                        absl::StrCat("an unmatched recv: ", status.ToString())));
  // Destroyed with a receive pending and its peer alive: returns (it
  // waited forever before), and the receive is cancelled.
  std::vector<at::Tensor> pending = {at::zeros({10})};
  c10::intrusive_ptr<c10d::Work> work = joined.pg->recv(pending, 1, 4);
  const absl::Time start = absl::Now();
  store.set("destroying", std::vector<uint8_t>{'1'});
  joined.pg.reset();
  std::fprintf(stderr, "rank 0: destroyed in %s\n",
               absl::FormatDuration(absl::Now() - start).c_str());
  status = Wait(work);
  return Check(absl::StrContains(status.message(), "destroyed"),
               absl::StrCat("a recv pending at destruction: ", status.ToString()));
}

// A message that arrives while its receiver tears the group down: rank 0
// destroys its group with a receive pending, and rank 1 sends the matching
// message only once rank 0 has started destroying (so it lands, most
// times, during rank 0's shutdown barrier, which keeps the messenger
// progressing). Either the receive completed before the tear-down (its
// Work ok, the tensor filled) or it was cancelled, and then nothing may
// land in its tensor.
absl::Status MessageDuringTearDown(Joined& joined) {
  c10d::Store& store = *joined.store->store();
  if (joined.rank == 1) {
    store.wait({"destroying"}, std::chrono::seconds(120));
    std::vector<at::Tensor> late = {at::full({10}, 7.0f)};
    absl::Status sent = Wait(joined.pg->send(late, 0, 4));
    std::fprintf(stderr, "rank 1: late send: %s\n", sent.ToString().c_str());
    joined.pg.reset();  // the tear-down is collective
    return absl::OkStatus();
  }
  std::vector<at::Tensor> pending = {at::zeros({10})};
  c10::intrusive_ptr<c10d::Work> work = joined.pg->recv(pending, 1, 4);
  store.set("destroying", std::vector<uint8_t>{'1'});
  joined.pg.reset();
  const absl::Status status = Wait(work);
  const float first = pending[0][0].item<float>();
  const float sum = pending[0].sum().item<float>();
  std::fprintf(stderr, "rank 0: recv pending at destruction: %s, tensor sum %g\n",
               status.ToString().c_str(), sum);
  if (status.ok()) {
    return Check(first == 7.0f && sum == 70.0f, "a completed receive holds the message");
  }
  return Check(absl::StrContains(status.message(), "destroyed") && sum == 0.0f,
               absl::StrCat("a cancelled receive's tensor was written after its Work said ",
                            status.ToString(), " (sum ", sum, ")"));
}

// LibTorch throws on the engine thread: a contiguous copy of a 64 TiB
// broadcast view cannot be allocated.
absl::Status EngineException(Joined& joined) {
  std::vector<at::Tensor> huge = {at::ones({1}).expand({int64_t{1} << 44})};
  absl::Status status = Wait(joined.pg->broadcast(huge));
  std::fprintf(stderr, "rank %d: broadcast: %s\n", joined.rank, status.ToString().c_str());
  return Check(!status.ok() && (absl::StrContains(status.message(), "LibTorch") ||
                                absl::StrContains(status.message(), "memory")),
               absl::StrCat("a broadcast whose copy throws: ", status.ToString()));
}

// With RDMAFLOW_INLINE_KB on: thread A all-reduces small tensors (inline
// while nothing else is in flight, on the engine thread otherwise) while
// thread B ping-pongs messages with its pair rank in the same group, so the
// transport keeps changing hands between callers and the engine thread.
// Every all-reduce and every message must be exact, and some calls must
// have run inline.
absl::Status InlineBesidePointToPoint(Joined& joined) {
  ProcessGroupRdmaflow& pg = *joined.pg;
  const int rank = joined.rank;
  const int world = joined.world;
  constexpr int kAllReduces = 1000;
  constexpr int kRounds = 200;
  // A thread's body: LibTorch may throw, and nothing may escape a thread.
  auto guarded = [](absl::Status& out, const std::function<absl::Status()>& body) {
    try {
      out = body();
    } catch (const std::exception& e) {
      out = absl::InternalError(e.what());
    }
  };
  absl::Status collectives;
  absl::Status messages;
  std::thread a([&] {
    guarded(collectives, [&]() -> absl::Status {
      for (int i = 0; i < kAllReduces; ++i) {
        std::vector<at::Tensor> t = {Values(rank, 1000, at::kFloat, i)};
        RETURN_IF_ERROR(Wait(pg.allreduce(t)));
        at::Tensor expected = Values(0, 1000, at::kFloat, i);
        for (int r = 1; r < world; ++r) expected += Values(r, 1000, at::kFloat, i);
        RETURN_IF_ERROR(CheckEqual(t[0], expected, absl::StrCat("all-reduce ", i)));
      }
      return absl::OkStatus();
    });
  });
  std::thread b([&] {
    guarded(messages, [&]() -> absl::Status {
      const int peer = rank ^ 1;
      if (peer >= world) return absl::OkStatus();
      for (int round = 0; round < kRounds; ++round) {
        std::vector<at::Tensor> out = {Values(rank, 100 + round, at::kDouble, round)};
        std::vector<at::Tensor> in = {at::zeros({100 + round}, at::kDouble)};
        auto received = pg.recv(in, peer, round);
        RETURN_IF_ERROR(Wait(pg.send(out, peer, round)));
        RETURN_IF_ERROR(Wait(received));
        RETURN_IF_ERROR(CheckEqual(in[0], Values(peer, 100 + round, at::kDouble, round),
                                   absl::StrCat("message ", round)));
      }
      return absl::OkStatus();
    });
  });
  a.join();
  b.join();
  RETURN_IF_ERROR(collectives);
  RETURN_IF_ERROR(messages);
  const torch_backend::BackendStats stats = pg.stats();
  std::fprintf(stderr, "rank %d: %lld of %lld all-reduces inline\n", rank,
               static_cast<long long>(stats.inline_calls),
               static_cast<long long>(stats.allreduces));
  RETURN_IF_ERROR(Check(stats.inline_calls > 0, "no all-reduce ran inline"));
  return Wait(pg.barrier());
}

// The Messenger, the ring and the same-host all-reduce share the group's
// links: one endpoint and one liveness watch per peer, and control lanes
// to the ring's neighbours: the left one's for its credits, the right
// one's for its flags (one lane when they are one rank: 2 members).
absl::Status SharedLinks(ProcessGroupRdmaflow& pg, int world) {
  const torch_backend::BackendStats stats = pg.stats();
  const int64_t endpoints = (world - 1) + (world > 2 ? 2 : 1);
  return Check(stats.peer_watches == world - 1 && stats.peer_endpoints == endpoints,
               absl::StrCat("the group's links: ", stats.peer_endpoints, " endpoints and ",
                            stats.peer_watches, " watches for ", world - 1,
                            " peers (expected ", endpoints, " and ", world - 1, ")"));
}

absl::Status RunRank(const std::string& which) {
  ASSIGN_OR_RETURN(Joined joined, Join());
  ProcessGroupRdmaflow& pg = *joined.pg;
  if (which == "collectives") {
    RETURN_IF_ERROR(AllReduces(pg, joined.rank, joined.world));
    RETURN_IF_ERROR(OtherCollectives(pg, joined.rank, joined.world));
    RETURN_IF_ERROR(Layouts(pg, joined.rank, joined.world));
    RETURN_IF_ERROR(PointToPoint(pg, joined.rank, joined.world));
    RETURN_IF_ERROR(SharedLinks(pg, joined.world));
    return Errors(pg, joined.rank, joined.world);
  }
  if (which == "shared_tensors") return SharedTensors(pg, joined.rank, joined.world);
  if (which == "ring") {
    RETURN_IF_ERROR(AllReduces(pg, joined.rank, joined.world));
    return RingPlaces(pg, joined.rank, joined.world);
  }
  if (which == "dead_rank") {
    std::vector<at::Tensor> tensors = {at::ones({1000})};
    RETURN_IF_ERROR(Wait(pg.allreduce(tensors)));
    if (joined.rank == joined.world - 1) raise(SIGKILL);  // dies mid-job
    std::vector<at::Tensor> recv = {at::zeros({10})};
    auto pending_recv = pg.recv(recv, joined.world - 1, 5);
    absl::Status collective = Wait(pg.allreduce(tensors));
    absl::Status p2p = Wait(pending_recv);
    std::fprintf(stderr, "rank %d: allreduce: %s\nrank %d: recv: %s\n", joined.rank,
                 collective.ToString().c_str(), joined.rank, p2p.ToString().c_str());
    RETURN_IF_ERROR(Check(!collective.ok(), "an allreduce with a dead rank succeeded"));
    RETURN_IF_ERROR(Check(!p2p.ok(), "a recv from a dead rank succeeded"));
    // Ended by liveness (the group's timeout is 60 s): the receive names the
    // dead rank; the all-reduce either does, or names a survivor that gave
    // up on it first (the same-host path tells the others at once).
    const std::string dead = absl::StrCat("peer rank ", joined.world - 1, " (pid ");
    auto names_dead = [&](const absl::Status& status) {
      return absl::StrContains(status.message(), dead) &&
             absl::StrContains(status.message(), "has exited");
    };
    RETURN_IF_ERROR(Check(names_dead(p2p), absl::StrCat("the receive from the dead rank: ",
                                                        p2p.ToString())));
    RETURN_IF_ERROR(Check((names_dead(collective) ||
                           absl::StrContains(collective.message(), "gave up during its call")) &&
                              !absl::StrContains(collective.message(), "timed out"),
                          absl::StrCat("the all-reduce with the dead rank: ",
                                       collective.ToString())));
    // Later collectives fail at once, naming the first failure.
    absl::Status later = Wait(pg.barrier());
    return Check(absl::StrContains(later.message(), "unusable"),
                 absl::StrCat("a collective after the failure: ", later.ToString()));
  }
  if (which == "inline_threads") return InlineBesidePointToPoint(joined);
  if (absl::string_view part_text = which;
      absl::ConsumePrefix(&part_text, "slow_collective:")) {
    int part = -1;
    if (!absl::SimpleAtoi(part_text, &part)) {
      return absl::InvalidArgumentError(absl::StrCat("bad case ", which));
    }
    return SlowCollective(joined, part);
  }
  if (which == "p2p_deadline") return PointToPointDeadline(joined);
  if (which == "p2p_teardown") return MessageDuringTearDown(joined);
  if (which == "engine_exception") return EngineException(joined);
  return absl::InvalidArgumentError(absl::StrCat("unknown case ", which));
}

std::map<std::string, std::string> Env(const char* which) {
  return {{kCaseEnv, which},
          {"RDMAFLOW_TRANSPORT_PARAMS", "tls=shm"},
          {"RDMAFLOW_STAGING_MB", "4"},
          // Ordinary tensors from 256 KiB on are read by the peers out of
          // their processes (65537 elements and up; the default is 4 MiB).
          {"RDMAFLOW_CMA_MIN_KB", "256"},
          {"RDMAFLOW_REGISTERED_MB", "8"}};
}

TEST(TorchBackendMultiProcessTest, EveryCollectiveWithTwoRanks) {
  EXPECT_OK(launch::LaunchRanks(2, Env("collectives")).status);
}

TEST(TorchBackendMultiProcessTest, EveryCollectiveWithFourRanks) {
  EXPECT_OK(launch::LaunchRanks(4, Env("collectives")).status);
}

TEST(TorchBackendMultiProcessTest, SharedTensorsAreReadWhereTheyLie) {
  std::map<std::string, std::string> env = Env("shared_tensors");
  env["RDMAFLOW_SHARED_TENSORS"] = "on";
  env["RDMAFLOW_SHARED_TENSORS_MIN_KB"] = "64";
  EXPECT_OK(launch::LaunchRanks(3, env).status);
}

TEST(TorchBackendMultiProcessTest, AllReducesOverTheRing) {
  std::map<std::string, std::string> env = Env("ring");
  env["RDMAFLOW_DIRECT"] = "off";
  EXPECT_OK(launch::LaunchRanks(3, env).status);
}

TEST(TorchBackendMultiProcessTest, InlineAllReducesBesideAnotherThreadsMessages) {
  for (int world : {2, 4}) {
    std::map<std::string, std::string> env = Env("inline_threads");
    env["RDMAFLOW_INLINE_KB"] = "64";
    EXPECT_OK(launch::LaunchRanks(world, env).status) << world << " ranks";
  }
}

TEST(TorchBackendMultiProcessTest, ADeadRankFailsThePendingWorkOfItsPeers) {
  // Rank 2's SIGKILL is the test, not a failure: the launcher stops nobody.
  launch::JobOptions options;
  options.world_size = 3;
  options.env = Env("dead_rank");
  options.timeout = launch::kTestJobTimeout;
  options.churn.expendable = 2;
  const launch::JobResult result = launch::RunJob(options);
  EXPECT_OK(result.status);
  EXPECT_THAT(result.codes(), ::testing::ElementsAre(0, 0, 128 + SIGKILL));
}

std::map<std::string, std::string> ShortTimeout(const char* which) {
  std::map<std::string, std::string> env = Env(which);
  env["RDMAFLOW_PG_TEST_TIMEOUT_S"] = "5";
  return env;
}

// One test a part of the straggler cases (SlowCollective).
class TorchBackendSlowPeerStragglerTest : public ::testing::TestWithParam<int> {};

TEST_P(TorchBackendSlowPeerStragglerTest,
       EveryCollectiveLetsGoOfItsBuffersWhenItGivesUpOnAStraggler) {
  const std::string which = absl::StrCat("slow_collective:", GetParam());
  EXPECT_OK(launch::LaunchRanks(2, ShortTimeout(which.c_str())).status);
}

INSTANTIATE_TEST_SUITE_P(Parts, TorchBackendSlowPeerStragglerTest,
                         ::testing::Range(0, kStragglerParts));

TEST(TorchBackendSlowPeerTest, AnUnmatchedReceiveTimesOutAndDestructionReturns) {
  EXPECT_OK(launch::LaunchRanks(2, ShortTimeout("p2p_deadline")).status);
}

TEST(TorchBackendSlowPeerTest, AMessageArrivingDuringTearDownNeverLandsInACancelledReceive) {
  EXPECT_OK(launch::LaunchRanks(2, Env("p2p_teardown")).status);
}

TEST(TorchBackendSlowPeerTest, AnExceptionOnTheEngineThreadFailsTheWork) {
  EXPECT_OK(launch::LaunchRanks(1, Env("engine_exception")).status);
}

}  // namespace
}  // namespace rdmaflow

int main(int argc, char** argv) {
  return rdmaflow::launch::RanksOrTestsMain(
      argc, argv, rdmaflow::kCaseEnv,
      [](const char* which) { return rdmaflow::RunRank(which); });
}
