// post_paths_benchmark: what the software around a same-host write costs,
// one thread, Google Benchmark. Two UCX transports over shared memory in
// this process, rank 0 writing into rank 1's memory:
//
//   BM_IdleProgress             Transport::Progress() with nothing to do:
//                               what each look of a waiting loop costs;
//   BM_FlaggedWrite/bytes/bound Endpoint::PostWriteWithFlag (bound:0),
//                               the post of a binding made once
//                               (Endpoint::BindFlaggedWrite, bound:1) or
//                               its post with no completion
//                               (BoundFlaggedWrite::TryPostInline,
//                               bound:2), the flag seen in rank 1's memory,
//                               the completion fired (if any);
//   BM_FlaggedPost/bytes/bound  the post alone, completions fired in
//                               batches of 64;
//   BM_NotifiedWrite/bytes      a notified write, taken from rank 1's
//                               PollNotification, the completion fired;
//   BM_MappedCopyAndFlag/bytes  the floor: memcpy into the peer's mapped
//                               memory and a release store of the flag,
//                               with no transport call.
//
// Both write paths are timed to the point the peer has seen the write, in
// one thread, so the figures are the software's cost per write without the
// cache-line migration a second core adds (bench/transport_pingpong measures
// that, next to ucx_perftest).
//   bazel run -c opt //bench:post_paths_benchmark
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "common/shared_word.h"
#include "rdma/builtin_transports.h"
#include "rdma/endpoint.h"
#include "rdma/memory_region.h"
#include "rdma/transport.h"

namespace rdmaflow::bench {
namespace {

constexpr size_t kMaxBytes = 4096;
constexpr size_t kFlagOffset = kMaxBytes;  // behind the largest write

// Ranks 0 and 1, an endpoint 0 -> 1, a source on 0 and a target on 1.
struct Pair {
  std::unique_ptr<rdma::Transport> a, b;
  std::unique_ptr<rdma::Endpoint> ab;
  rdma::MemoryRegion source, target;

  absl::Status Init() {
    for (int rank : {0, 1}) {
      absl::StatusOr<std::unique_ptr<rdma::Transport>> t =
          rdma::CreateBuiltinTransport("ucx", "tls=shm", rank);
      if (!t.ok()) return t.status();
      (rank == 0 ? a : b) = *std::move(t);
    }
    absl::StatusOr<std::unique_ptr<rdma::Endpoint>> e =
        a->Connect({b->rank(), b->address()});
    if (!e.ok()) return e.status();
    ab = *std::move(e);
    absl::StatusOr<rdma::MemoryRegion> s = a->Allocate(kMaxBytes);
    if (!s.ok()) return s.status();
    source = *std::move(s);
    absl::StatusOr<rdma::MemoryRegion> t = b->Allocate(kFlagOffset + 8);
    if (!t.ok()) return t.status();
    target = *std::move(t);
    return absl::OkStatus();
  }

  // Progresses both ranks (rank 0 only with `both` false) until `done()`;
  // kDeadlineExceeded after 10 s, which no write here comes near.
  absl::Status ProgressUntil(absl::FunctionRef<bool()> done, bool both = true) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    for (uint32_t round = 0; !done(); ++round) {
      if (absl::Status s = a->Progress().status(); !s.ok()) return s;
      if (both) {
        if (absl::Status s = b->Progress().status(); !s.ok()) return s;
      }
      // The clock every 1024 rounds: a look per round would be what is timed.
      if ((round & 1023) == 1023 && absl::Now() > deadline) {
        return absl::DeadlineExceededError("a benchmarked write never completed");
      }
    }
    return absl::OkStatus();
  }

  // A flagged write of `bytes` with `flag` behind the largest write, posted
  // through `bound` where it is set (Bind()); `done` counts its completion.
  absl::Status WriteWithFlag(size_t bytes, uint64_t flag, int& done) {
    if (bound != nullptr && inline_posts) {
      absl::StatusOr<bool> posted = bound->TryPostInline(flag);
      if (!posted.ok()) return posted.status();
      if (*posted) {
        ++done;  // done at once, and nothing will fire
        return absl::OkStatus();
      }
    }
    rdma::Completion counted = [&done](absl::Status) { ++done; };
    if (bound != nullptr) return bound->Post(flag, std::move(counted));
    const rdma::RemoteRegion& remote = target.descriptor();
    return ab->PostWriteWithFlag({&source, 0, bytes}, {&remote, 0, bytes},
                                 {&remote, kFlagOffset, 8}, flag, std::move(counted));
  }

  // Binds the flagged write of `bytes` that WriteWithFlag() posts from now.
  absl::Status Bind(size_t bytes) {
    const rdma::RemoteRegion& remote = target.descriptor();
    absl::StatusOr<std::unique_ptr<rdma::BoundFlaggedWrite>> write = ab->BindFlaggedWrite(
        {&source, 0, bytes}, {&remote, 0, bytes}, {&remote, kFlagOffset, 8});
    if (!write.ok()) return write.status();
    bound = *std::move(write);
    return absl::OkStatus();
  }

  std::unique_ptr<rdma::BoundFlaggedWrite> bound;
  bool inline_posts = false;  // TryPostInline() first
};

// Sets up a pair or skips the benchmark with the reason.
bool SetUp(benchmark::State& state, Pair& pair) {
  if (absl::Status status = pair.Init(); !status.ok()) {
    state.SkipWithError(status.ToString().c_str());
    return false;
  }
  return true;
}

// The same, for a benchmark of flagged writes of state.range(0) bytes,
// bound where state.range(1) is 1, bound and posted inline where it is 2.
bool SetUpFlagged(benchmark::State& state, Pair& pair) {
  if (!SetUp(state, pair)) return false;
  if (!pair.a->capabilities().flag_writes) {
    state.SkipWithError("the transport has no flagged writes");
    return false;
  }
  if (state.range(1) >= 1) {
    pair.inline_posts = state.range(1) == 2;
    if (absl::Status bound = pair.Bind(static_cast<size_t>(state.range(0))); !bound.ok()) {
      state.SkipWithError(bound.ToString().c_str());
      return false;
    }
  }
  return true;
}

void BM_IdleProgress(benchmark::State& state) {
  Pair pair;
  if (!SetUp(state, pair)) return;
  for (auto _ : state) {
    benchmark::DoNotOptimize(pair.a->Progress());
  }
}
BENCHMARK(BM_IdleProgress);

void BM_FlaggedWrite(benchmark::State& state) {
  Pair pair;
  if (!SetUpFlagged(state, pair)) return;
  const size_t bytes = static_cast<size_t>(state.range(0));
  const std::byte* word = pair.target.data() + kFlagOffset;
  uint64_t flag = 0;
  int done = 0;
  for (auto _ : state) {
    ++flag;
    absl::Status posted = pair.WriteWithFlag(bytes, flag, done);
    if (!posted.ok()) {
      state.SkipWithError(posted.ToString().c_str());
      return;
    }
    absl::Status seen = pair.ProgressUntil(
        [&] { return LoadSharedWord(word) == flag && done == static_cast<int>(flag); });
    if (!seen.ok()) {
      state.SkipWithError(seen.ToString().c_str());
      return;
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(bytes));
}
BENCHMARK(BM_FlaggedWrite)->ArgsProduct({{8, kMaxBytes}, {0, 1, 2}})->ArgNames({"", "bound"});

// The post alone: completions fired once per 64 posts, so each write
// carries a 64th of a Progress() (the cost on a writer's critical path).
void BM_FlaggedPost(benchmark::State& state) {
  Pair pair;
  if (!SetUpFlagged(state, pair)) return;
  const size_t bytes = static_cast<size_t>(state.range(0));
  uint64_t flag = 0;
  int done = 0;
  for (auto _ : state) {
    ++flag;
    absl::Status posted = pair.WriteWithFlag(bytes, flag, done);
    if (!posted.ok()) {
      state.SkipWithError(posted.ToString().c_str());
      return;
    }
    if ((flag & 63) == 0) {
      absl::Status fired =
          pair.ProgressUntil([&] { return done == static_cast<int>(flag); }, /*both=*/false);
      if (!fired.ok()) {
        state.SkipWithError(fired.ToString().c_str());
        return;
      }
    }
  }
}
BENCHMARK(BM_FlaggedPost)->ArgsProduct({{8, kMaxBytes}, {0, 1, 2}})->ArgNames({"", "bound"});

void BM_NotifiedWrite(benchmark::State& state) {
  Pair pair;
  if (!SetUp(state, pair)) return;
  const size_t bytes = static_cast<size_t>(state.range(0));
  const rdma::RemoteRegion& remote = pair.target.descriptor();
  uint32_t sent = 0;
  int done = 0;
  for (auto _ : state) {
    ++sent;
    absl::Status posted = pair.ab->PostWrite(
        {&pair.source, 0, bytes}, {&remote, 0, bytes}, sent,
        [&done](absl::Status) { ++done; });
    if (!posted.ok()) {
      state.SkipWithError(posted.ToString().c_str());
      return;
    }
    bool seen = false;
    absl::Status arrived = pair.ProgressUntil([&] {
      if (!seen) seen = pair.b->PollNotification().has_value();
      return seen && done == static_cast<int>(sent);
    });
    if (!arrived.ok()) {
      state.SkipWithError(arrived.ToString().c_str());
      return;
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(bytes));
}
BENCHMARK(BM_NotifiedWrite)->Arg(8)->Arg(kMaxBytes);

void BM_MappedCopyAndFlag(benchmark::State& state) {
  Pair pair;
  if (!SetUp(state, pair)) return;
  const size_t bytes = static_cast<size_t>(state.range(0));
  const rdma::RemoteRegion& remote = pair.target.descriptor();
  absl::StatusOr<std::byte*> mapped =
      pair.ab->MapRemote({&remote, 0, kFlagOffset + 8});
  if (!mapped.ok()) {
    state.SkipWithError(mapped.status().ToString().c_str());
    return;
  }
  const std::byte* word = pair.target.data() + kFlagOffset;
  uint64_t flag = 0;
  for (auto _ : state) {
    ++flag;
    std::memcpy(*mapped, pair.source.data(), bytes);
    StoreSharedWord(*mapped + kFlagOffset, flag);
    while (LoadSharedWord(word) != flag) {
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(bytes));
}
BENCHMARK(BM_MappedCopyAndFlag)->Arg(8)->Arg(kMaxBytes);

}  // namespace
}  // namespace rdmaflow::bench
