// File: host_allreduce_test.cc
// HostAllReduce's reduce to a root and broadcast from one (the first and
// last phases of a hierarchical all-reduce), over loopback transports,
// ranks as threads: exact results on both paths (one-shot and
// scatter-gather) for every root, each member at an offset of its own, and
// calls that differ in kind or root named on every member.
#include "collectives/host_allreduce.h"

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collectives/shared_segments.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onesided/progress/progress_loop.h"
#include "rdma/testing/rank_threads.h"

namespace rdmaflow::collectives {
namespace {

using ::rdmaflow::rdma::testing::RunRankThreads;
using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr size_t kCapacity = 1 << 20;

HostAllReduceOptions Options(onesided::ProgressLoop* loop) {
  HostAllReduceOptions options;
  options.one_shot_max_bytes = 4 << 10;
  options.chunk_bytes = 1 << 10;
  options.timeout = absl::Seconds(30);
  options.loop = loop;
  return options;
}

// Runs body(rank, host, data) on `world` ranks as threads, each with a
// HostAllReduce over all of them on its own region, then shuts it down;
// every rank's status.
std::vector<absl::Status> WithHosts(
    int world,
    const std::function<absl::Status(int rank, HostAllReduce& host, std::byte* data)>& body,
    bool external_reads = true) {
  std::vector<int> members;
  for (int r = 0; r < world; ++r) members.push_back(r);
  return RunRankThreads(
      world, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        onesided::ProgressLoop loop(transport, {});
        ASSIGN_OR_RETURN(rdma::MemoryRegion data, transport.Allocate(kCapacity));
        HostAllReduceOptions options = Options(&loop);
        options.external_reads = external_reads;
        ASSIGN_OR_RETURN(auto host,
                         HostAllReduce::Create(transport, store, "t", members, data, options));
        absl::Status status = body(rank, *host, data.data());
        absl::Status shutdown = host->Shutdown();
        return status.ok() ? shutdown : status;
      });
}

float Value(int rank, size_t i) { return static_cast<float>((i * 3 + rank * 11) % 512); }

TEST(HostAllReduceTest, ReduceLeavesTheSumAtTheRootOnBothPaths) {
  for (int world : {2, 3, 5}) {
    for (size_t count : {size_t{7}, size_t{1024}, size_t{1025}, size_t{40001}}) {
      SCOPED_TRACE(absl::StrCat(world, " members, ", count, " floats"));
      std::vector<absl::Status> statuses =
          WithHosts(world, [&](int rank, HostAllReduce& host, std::byte* data) -> absl::Status {
            // Each member's range at an offset of its own.
            const size_t offset = 64 * static_cast<size_t>(rank);
            float* values = reinterpret_cast<float*>(data + offset);
            for (int root = 0; root < world; ++root) {
              for (size_t i = 0; i < count; ++i) values[i] = Value(rank, i);
              RETURN_IF_ERROR(host.Reduce(offset, count, DataType::kFloat32, ReduceOp::kSum,
                                          root));
              if (rank != root) continue;
              for (size_t i = 0; i < count; ++i) {
                float sum = 0;
                for (int r = 0; r < world; ++r) sum += Value(r, i);
                if (values[i] != sum) {
                  return absl::InternalError(absl::StrCat("root ", root, ", element ", i, ": ",
                                                          values[i], ", expected ", sum));
                }
              }
            }
            return absl::OkStatus();
          });
      for (int r = 0; r < world; ++r) EXPECT_OK(statuses[r]) << "rank " << r;
    }
  }
}

TEST(HostAllReduceTest, AResultBufferGetsTheSumAlsoWithOneMember) {
  for (int world : {1, 3}) {
    for (size_t count : {size_t{100}, size_t{40001}}) {  // one-shot, scatter-gather
      SCOPED_TRACE(absl::StrCat(world, " members, ", count, " floats"));
      std::vector<absl::Status> statuses =
          WithHosts(world, [&](int rank, HostAllReduce& host, std::byte* data) -> absl::Status {
            float* values = reinterpret_cast<float*>(data);
            for (size_t i = 0; i < count; ++i) values[i] = Value(rank, i);
            std::vector<float> result(count, -1.0f);
            RETURN_IF_ERROR(host.AllReduce(0, count, DataType::kFloat32, ReduceOp::kSum, 0,
                                           reinterpret_cast<std::byte*>(result.data())));
            for (size_t i = 0; i < count; ++i) {
              float sum = 0;
              for (int r = 0; r < world; ++r) sum += Value(r, i);
              if (result[i] != sum) {
                return absl::InternalError(absl::StrCat("element ", i, ": ", result[i],
                                                        ", expected ", sum));
              }
            }
            return absl::OkStatus();
          });
      for (int r = 0; r < world; ++r) EXPECT_OK(statuses[r]) << "rank " << r;
    }
  }
}

TEST(HostAllReduceTest, BroadcastCopiesTheRootsBytesToEveryMember) {
  constexpr int kWorld = 4;
  for (size_t bytes : {size_t{1}, size_t{4099}, size_t{300001}}) {
    SCOPED_TRACE(absl::StrCat(bytes, " bytes"));
    std::vector<absl::Status> statuses =
        WithHosts(kWorld, [&](int rank, HostAllReduce& host, std::byte* data) -> absl::Status {
          const size_t offset = 3 * static_cast<size_t>(rank);  // bytes: any alignment
          unsigned char* bytes_at = reinterpret_cast<unsigned char*>(data + offset);
          for (int root = 0; root < kWorld; ++root) {
            for (size_t i = 0; i < bytes; ++i) {
              bytes_at[i] = static_cast<unsigned char>(i * 31 + rank);
            }
            RETURN_IF_ERROR(host.Broadcast(offset, bytes, root));
            for (size_t i = 0; i < bytes; ++i) {
              const auto expected = static_cast<unsigned char>(i * 31 + root);
              if (bytes_at[i] != expected) {
                return absl::InternalError(absl::StrCat("root ", root, ", byte ", i, ": ",
                                                        bytes_at[i], ", expected ", expected));
              }
            }
          }
          return absl::OkStatus();
        });
    for (int r = 0; r < kWorld; ++r) EXPECT_OK(statuses[r]) << "rank " << r;
  }
}

TEST(HostAllReduceTest, CallsThatDifferInKindOrRootAreNamedAndTheCollectiveGoesOn) {
  std::vector<absl::Status> first(2), second(2);
  std::vector<absl::Status> statuses =
      WithHosts(2, [&](int rank, HostAllReduce& host, std::byte*) -> absl::Status {
        first[rank] = rank == 0 ? host.Broadcast(0, 400, 0)
                                : host.AllReduce(0, 100, DataType::kFloat32);
        second[rank] = host.Reduce(0, 100, DataType::kFloat32, ReduceOp::kMax, rank);
        // Both left both calls: the next one works.
        return host.Broadcast(0, 400, 1);
      });
  for (int r = 0; r < 2; ++r) {
    EXPECT_OK(statuses[r]) << "rank " << r;
    EXPECT_THAT(first[r], StatusIs(absl::StatusCode::kInvalidArgument,
                                   AllOf(HasSubstr("Broadcast(offset 0, 400 bytes, root "
                                                   "position 0)"),
                                         HasSubstr("AllReduce(offset 0, count 100, float32 "
                                                   "sum)"))))
        << "rank " << r;
    EXPECT_THAT(second[r], StatusIs(absl::StatusCode::kInvalidArgument,
                                    HasSubstr("float32 max, root position ")))
        << "rank " << r;
  }
}

TEST(HostAllReduceTest, ABadRootIsRefusedOnItsMemberAndAnErrorOnEveryOther) {
  std::vector<absl::Status> calls(2);
  std::vector<absl::Status> statuses =
      WithHosts(2, [&](int rank, HostAllReduce& host, std::byte*) -> absl::Status {
        calls[rank] = host.Broadcast(0, 64, rank == 1 ? 2 : 0);
        return host.Broadcast(0, 64, 0);
      });
  for (int r = 0; r < 2; ++r) EXPECT_OK(statuses[r]) << "rank " << r;
  EXPECT_THAT(calls[1], StatusIs(absl::StatusCode::kInvalidArgument,
                                 HasSubstr("root position 2 is not a member's (0..1)")));
  EXPECT_THAT(calls[0], StatusIs(absl::StatusCode::kInvalidArgument,
                                 HasSubstr("rank 1 called something with a bad range or root")));
}

}  // namespace
}  // namespace rdmaflow::collectives

namespace rdmaflow::collectives {
namespace {

// Ranges outside the data region (the caller's own memory) meet ranges in
// it: even ranks pass a buffer of their own, odd ones their region; every
// member gets the sum, on both paths, and the peers' buffers were read out
// of their "process" (threads of one here: the same system calls).
TEST(HostAllReduceTest, BuffersOutsideTheRegionAreReducedInPlace) {
  for (int world : {2, 3, 4}) {
    for (size_t count : {size_t{100}, size_t{40001}}) {  // one-shot, scatter-gather
      SCOPED_TRACE(absl::StrCat(world, " members, ", count, " floats"));
      std::vector<absl::Status> statuses =
          WithHosts(world, [&](int rank, HostAllReduce& host, std::byte* data) -> absl::Status {
            if (!host.external()) {
              return absl::InternalError(absl::StrCat("no external reads: ",
                                                      host.external_refusal()));
            }
            std::vector<float> own(count);
            const bool outside = rank % 2 == 0;
            float* values = outside ? own.data() : reinterpret_cast<float*>(data);
            for (int round = 0; round < 2; ++round) {
              for (size_t i = 0; i < count; ++i) values[i] = Value(rank, i) + round;
              RETURN_IF_ERROR(
                  outside ? host.AllReduceExternal(reinterpret_cast<std::byte*>(own.data()),
                                                   count, DataType::kFloat32)
                          : host.AllReduce(0, count, DataType::kFloat32));
              for (size_t i = 0; i < count; ++i) {
                float sum = 0;
                for (int r = 0; r < world; ++r) sum += Value(r, i) + round;
                if (values[i] != sum) {
                  return absl::InternalError(absl::StrCat("round ", round, ", element ", i,
                                                          ": ", values[i], ", expected ", sum));
                }
              }
            }
            // Every peer of ours that passed a buffer was read with the
            // system call; the others through the mapping.
            int outside_peers = 0;
            for (int r = 0; r < world; ++r) outside_peers += r != rank && r % 2 == 0;
            if ((host.stats().process_reads > 0) != (outside_peers > 0)) {
              return absl::InternalError(absl::StrCat(host.stats().process_reads,
                                                      " process reads with ", outside_peers,
                                                      " peers outside their regions"));
            }
            if (host.stats().external_calls != (outside ? 2 : 0)) {
              return absl::InternalError("external calls miscounted");
            }
            return absl::OkStatus();
          });
      for (int r = 0; r < world; ++r) EXPECT_OK(statuses[r]) << "rank " << r;
    }
  }
}

// An empty call first (nothing read, nothing allocated yet), then 6 MiB
// on every member outside its region: each peer's segment is read in
// several system calls, into buffers that are refilled within the call.
TEST(HostAllReduceTest, EmptyAndLargeBuffersOutsideTheRegion) {
  constexpr int kWorld = 3;
  constexpr size_t kCount = size_t{3} << 19;  // 6 MiB of float32
  std::vector<absl::Status> statuses =
      WithHosts(kWorld, [&](int rank, HostAllReduce& host, std::byte*) -> absl::Status {
        RETURN_IF_ERROR(host.AllReduceExternal(nullptr, 0, DataType::kFloat32));
        std::vector<float> own(kCount);
        for (size_t i = 0; i < kCount; ++i) own[i] = Value(rank, i);
        RETURN_IF_ERROR(host.AllReduceExternal(reinterpret_cast<std::byte*>(own.data()),
                                               kCount, DataType::kFloat32));
        for (size_t i = 0; i < kCount; ++i) {
          float sum = 0;
          for (int r = 0; r < kWorld; ++r) sum += Value(r, i);
          if (own[i] != sum) {
            return absl::InternalError(absl::StrCat("element ", i, ": ", own[i], ", expected ",
                                                    sum));
          }
        }
        // 2 MiB segments: at least 8 reads of 256 KiB per peer.
        if (host.stats().process_reads < 2 * 8) {
          return absl::InternalError(absl::StrCat(host.stats().process_reads, " reads"));
        }
        return absl::OkStatus();
      });
  for (int r = 0; r < kWorld; ++r) EXPECT_OK(statuses[r]) << "rank " << r;
}

// Buffers in shared segments (the c10d backend's allocator) are mapped by
// the peers at first sight and read where they lie; an ordinary buffer
// beside them is still read out of its process. Ranks 0 and 2 pass
// segments, rank 1 a buffer of its own, for two calls on the same buffers
// (the mappings are kept), on both paths.
TEST(HostAllReduceTest, BuffersInSharedSegmentsAreMappedOnceAndReadWhereTheyLie) {
  constexpr int kWorld = 3;
  for (size_t count : {size_t{100}, size_t{300001}}) {  // one-shot, scatter-gather
    SCOPED_TRACE(absl::StrCat(count, " floats"));
    std::vector<absl::Status> statuses =
        WithHosts(kWorld, [&](int rank, HostAllReduce& host, std::byte*) -> absl::Status {
          const bool shared = rank != 1;
          std::vector<float> own(shared ? 0 : count);
          float* values = own.data();
          if (shared) {
            ASSIGN_OR_RETURN(std::byte * segment,
                             SharedSegments::Process().Allocate(count * sizeof(float)));
            values = reinterpret_cast<float*>(segment);
          }
          const absl::Cleanup release = [&] {
            if (shared) SharedSegments::Process().Release(reinterpret_cast<std::byte*>(values));
          };
          for (int round = 0; round < 2; ++round) {
            for (size_t i = 0; i < count; ++i) values[i] = Value(rank, i) + round;
            RETURN_IF_ERROR(host.AllReduceExternal(reinterpret_cast<std::byte*>(values), count,
                                                   DataType::kFloat32));
            for (size_t i = 0; i < count; ++i) {
              float sum = 0;
              for (int r = 0; r < kWorld; ++r) sum += Value(r, i) + round;
              if (values[i] != sum) {
                return absl::InternalError(absl::StrCat("round ", round, ", element ", i,
                                                        ": ", values[i], ", expected ", sum));
              }
            }
          }
          const HostAllReduceStats& stats = host.stats();
          const int64_t segment_peers = rank == 1 ? 2 : 1;
          if (stats.segments_mapped != segment_peers || stats.segment_reads == 0 ||
              stats.segment_fallbacks != 0 || (stats.process_reads > 0) != (rank != 1)) {
            return absl::InternalError(absl::StrCat(
                stats.segments_mapped, " segments mapped, ", stats.segment_reads,
                " segment reads, ", stats.segment_fallbacks, " fallbacks (",
                host.segment_refusal(), "), ", stats.process_reads, " process reads"));
          }
          return absl::OkStatus();
        });
    for (int r = 0; r < kWorld; ++r) EXPECT_OK(statuses[r]) << "rank " << r;
  }
}

// One member with the reads off keeps every member off, without an error;
// a misaligned buffer is refused like a bad range.
TEST(HostAllReduceTest, OneMemberWithTheReadsOffKeepsThemAllOff) {
  std::vector<int> members = {0, 1};
  std::vector<absl::Status> statuses = RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        onesided::ProgressLoop loop(transport, {});
        ASSIGN_OR_RETURN(rdma::MemoryRegion data, transport.Allocate(kCapacity));
        HostAllReduceOptions options = Options(&loop);
        options.external_reads = rank == 0;
        ASSIGN_OR_RETURN(auto host,
                         HostAllReduce::Create(transport, store, "t", members, data, options));
        if (host->external() ||
            !absl::StrContains(host->external_refusal(), "rank 1: off in its options")) {
          return absl::InternalError(absl::StrCat("refusal: ", host->external_refusal()));
        }
        return host->Shutdown();
      });
  for (int r = 0; r < 2; ++r) EXPECT_OK(statuses[r]) << "rank " << r;
  statuses = WithHosts(2, [&](int rank, HostAllReduce& host, std::byte*) -> absl::Status {
    std::vector<float> own(11, 1.0f);
    absl::Status status =
        rank == 0 ? host.AllReduceExternal(reinterpret_cast<std::byte*>(own.data()) + 2, 10,
                                           DataType::kFloat32)
                  : host.AllReduce(0, 10, DataType::kFloat32);
    const absl::StatusCode expected = absl::StatusCode::kInvalidArgument;
    if (status.code() != expected ||
        (rank == 0 && !absl::StrContains(status.message(), "not aligned"))) {
      return absl::InternalError(absl::StrCat("got ", status.ToString()));
    }
    return absl::OkStatus();
  });
  for (int r = 0; r < 2; ++r) EXPECT_OK(statuses[r]) << "rank " << r;
}

// Off in the options: the call is refused on its member, and an error,
// not a wait, on the others; the collective goes on.
TEST(HostAllReduceTest, ABufferOutsideTheRegionNeedsTheMembersAgreement) {
  std::vector<absl::Status> statuses = WithHosts(
      2,
      [&](int rank, HostAllReduce& host, std::byte* data) -> absl::Status {
        if (host.external() || !absl::StrContains(host.external_refusal(), "off in its options")) {
          return absl::InternalError(absl::StrCat("refusal: ", host.external_refusal()));
        }
        std::vector<float> own(10, 1.0f);
        absl::Status status =
            rank == 0 ? host.AllReduceExternal(reinterpret_cast<std::byte*>(own.data()), 10,
                                               DataType::kFloat32)
                      : host.AllReduce(0, 10, DataType::kFloat32);
        const absl::StatusCode expected = rank == 0 ? absl::StatusCode::kFailedPrecondition
                                                    : absl::StatusCode::kInvalidArgument;
        if (status.code() != expected ||
            (rank == 0 && !absl::StrContains(status.message(), "did not agree"))) {
          return absl::InternalError(absl::StrCat("got ", status.ToString()));
        }
        reinterpret_cast<float*>(data)[0] = 1.0f;
        RETURN_IF_ERROR(host.AllReduce(0, 1, DataType::kFloat32));
        if (reinterpret_cast<float*>(data)[0] != 2.0f) return absl::InternalError("no sum");
        return absl::OkStatus();
      },
      /*external_reads=*/false);
  for (int r = 0; r < 2; ++r) EXPECT_OK(statuses[r]) << "rank " << r;
}

}  // namespace
}  // namespace rdmaflow::collectives
