// File: host_allreduce_hostile_test.cc
// HostAllReduce against a hostile same-host peer. Rank 1 plays a member by
// hand: it publishes a layout, a data region and a control block like any
// member, says it mapped rank 0, and then writes forged words into its own
// control block, which rank 0 reads through its mapping: a call number from
// the future, other call arguments (also an out-of-range type/op word and
// a broadcast root no member holds), an offset outside its region, a
// reduced-chunks counter beyond its segment, a done flag ahead of the call,
// the mark of a member that gave up in the call; an address of its process
// memory that is not mapped there, wraps the address space, or comes
// though it refused such reads at set-up.
// Each fails rank 0's call with an error naming rank 1 before the value
// moves anything; the collective is then unusable.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "collectives/call_word.h"
#include "collectives/host_allreduce.h"
#include "collectives/peer_process.h"
#include "collectives/shared_segments.h"
#include "common/unique_fd.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onesided/progress/progress_loop.h"
#include "rdma/rendezvous.h"
#include "rdma/testing/racing_writer.h"
#include "rdma/testing/rank_threads.h"

namespace rdmaflow::collectives {
namespace {

namespace layout = host_allreduce_layout;
using ::rdmaflow::rdma::testing::RunRankThreads;
using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kNs[] = "host_hostile_test";
constexpr size_t kCapacity = 64 << 10;

HostAllReduceOptions Options(const std::string& name, onesided::ProgressLoop* loop) {
  HostAllReduceOptions options;
  options.name = name;
  options.one_shot_max_bytes = 1 << 10;
  options.chunk_bytes = 1 << 10;
  options.timeout = absl::Seconds(2);  // a forgery that went unnoticed stalls
  options.loop = loop;
  return options;
}

void SetWord(std::byte* block, size_t offset, uint64_t value) {
  __atomic_store_n(reinterpret_cast<uint64_t*>(block + offset), value, __ATOMIC_RELEASE);
}

struct Outcome {
  absl::Status call;   // rank 0's call against the forgery
  absl::Status again;  // a call after that
};

// Rank 0 makes `call` (by default AllReduce(0, count, float32 sum)) twice
// after rank 1, a member played by hand, wrote `forge` into its control
// block.
Outcome ForgeThenCall(const std::string& name, size_t count,
                      const std::function<void(std::byte* block)>& forge,
                      std::function<absl::Status(HostAllReduce&)> call = nullptr,
                      const std::string& external_answer = "ok") {
  if (call == nullptr) {
    call = [count](HostAllReduce& host) { return host.AllReduce(0, count, DataType::kFloat32); };
  }
  Outcome outcome;
  const std::string forged = absl::StrCat(kNs, "/", name, "/forged");
  const std::string judged = absl::StrCat(kNs, "/", name, "/judged");
  std::vector<absl::Status> results = RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        onesided::ProgressLoop loop(transport, {});
        ASSIGN_OR_RETURN(rdma::MemoryRegion data, transport.Allocate(kCapacity));
        const HostAllReduceOptions options = Options(name, &loop);
        if (rank == 0) {
          ASSIGN_OR_RETURN(auto host,
                           HostAllReduce::Create(transport, store, kNs, {0, 1}, data, options));
          RETURN_IF_ERROR(store.Wait({forged}, absl::Seconds(30)));
          outcome.call = call(*host);
          outcome.again = call(*host);
          return store.Set(judged, "1");
        }
        // The hostile member: everything a real one publishes.
        ASSIGN_OR_RETURN(rdma::MemoryRegion control, transport.Allocate(layout::kBytes));
        std::memset(control.data(), 0, control.size());
        const std::string key = absl::StrCat("host/", name, "/1/");
        RETURN_IF_ERROR(store.Set(absl::StrCat(kNs, "/", key, "layout"),
                                  HostAllReduce::LayoutText(options, kCapacity, {0, 1})));
        RETURN_IF_ERROR(rdma::PublishRegion(store, kNs, key + "data", data.descriptor()));
        RETURN_IF_ERROR(rdma::PublishRegion(store, kNs, key + "control", control.descriptor()));
        RETURN_IF_ERROR(rdma::PublishAddress(store, kNs, transport));
        RETURN_IF_ERROR(store.Set(absl::StrCat(kNs, "/", key, "mapped"), "ok"));
        // Rank 0 reads "our" process (its own: threads of one process).
        RETURN_IF_ERROR(store.Set(absl::StrCat(kNs, "/", key, "process"),
                                  FormatProcessToken(OwnProcessToken())));
        RETURN_IF_ERROR(store.Set(absl::StrCat(kNs, "/", key, "external"), external_answer));
        forge(control.data());
        RETURN_IF_ERROR(store.Set(forged, "1"));
        return store.Wait({judged}, absl::Seconds(30));
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
  return outcome;
}

// The words of an honest rank 1 in call 1 of AllReduce(0, count, float32).
void Entered(std::byte* block, size_t count) {
  SetWord(block, layout::kOffset, 0);
  SetWord(block, layout::kCount, count);
  SetWord(block, layout::kTypeOp, 0);  // float32 << 8 | sum
  SetWord(block, layout::kEntered, 1);
}

void ExpectRefused(const Outcome& outcome, absl::StatusCode code, const std::string& what) {
  EXPECT_THAT(outcome.call, StatusIs(code, AllOf(HasSubstr(what), HasSubstr("on rank 0"))));
  EXPECT_THAT(outcome.again,
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("unusable")));
}

// Other call arguments are a caller's error, not a broken peer: once both
// members have left the call, the collective takes the next one (which
// here times out, as rank 1 never makes it).
void ExpectDifferenceNamed(const Outcome& outcome, const std::string& what) {
  EXPECT_THAT(outcome.call, StatusIs(absl::StatusCode::kInvalidArgument,
                                     AllOf(HasSubstr(what), HasSubstr("on rank 0"))));
  EXPECT_THAT(outcome.again, StatusIs(absl::StatusCode::kDeadlineExceeded,
                                      HasSubstr("entry (rank 1) in call 2")));
}

TEST(HostAllReduceHostileTest, ACallNumberFromTheFutureIsRefused) {
  for (uint64_t value : {uint64_t{2}, uint64_t{1} << 40, ~uint64_t{0}}) {
    SCOPED_TRACE(value);
    Outcome outcome = ForgeThenCall(absl::StrCat("future", value % 1000), 100,
                                    [&](std::byte* block) {
                                      SetWord(block, layout::kEntered, value);
                                    });
    ExpectRefused(outcome, absl::StatusCode::kDataLoss,
                  absl::StrCat("rank 1 wrote call number ", value));
  }
}

TEST(HostAllReduceHostileTest, OtherCallArgumentsAreNamed) {
  // Rank 1 saw the difference too and left the call (done = 1).
  Outcome outcome = ForgeThenCall("count", 100, [](std::byte* block) {
    Entered(block, 100);
    SetWord(block, layout::kCount, uint64_t{1} << 62);
    SetWord(block, layout::kDone, 1);
  });
  ExpectDifferenceNamed(outcome,
                        "rank 1 called AllReduce(offset 0, count 4611686018427387904, "
                        "float32 sum)");
  Outcome garbage = ForgeThenCall("type", 100, [](std::byte* block) {
    Entered(block, 100);
    SetWord(block, layout::kTypeOp, 0xdead0077);
    SetWord(block, layout::kDone, 1);
  });
  ExpectDifferenceNamed(garbage, absl::StrCat("type/op word ", 0xdead0077));
}

TEST(HostAllReduceHostileTest, AForgedRootIsNamedNeverUsed) {
  // Rank 0 broadcasts from position 1; rank 1's word claims a broadcast
  // from position 2^20, which no member holds: a difference, never an index.
  Outcome outcome = ForgeThenCall(
      "root", 400,
      [](std::byte* block) {
        Entered(block, 400);
        SetWord(block, layout::kTypeOp, (uint64_t{1} << 52) | (layout::kBroadcastCall << 24));
        SetWord(block, layout::kDone, 1);
      },
      [](HostAllReduce& host) { return host.Broadcast(0, 400, 1); });
  ExpectDifferenceNamed(outcome,
                        "rank 1 called Broadcast(offset 0, 400 bytes, root position 1048576)");
}

TEST(HostAllReduceHostileTest, AnOffsetOutsideItsRegionIsRefused) {
  // Each member's range may lie at its own offset, so rank 0 reads rank 1's
  // where rank 1 says it is: only inside the region, and aligned.
  for (uint64_t offset : {uint64_t{kCapacity}, uint64_t{kCapacity} - 396, uint64_t{2},
                          ~uint64_t{0} - 3}) {
    SCOPED_TRACE(offset);
    Outcome outcome = ForgeThenCall(absl::StrCat("offset", offset % 1000), 100,
                                    [&](std::byte* block) {
                                      Entered(block, 100);
                                      SetWord(block, layout::kOffset, offset);
                                    });
    ExpectRefused(outcome, absl::StatusCode::kDataLoss,
                  absl::StrCat("rank 1 published offset ", offset, " for 400 bytes"));
  }
}

TEST(HostAllReduceHostileTest, AReducedCounterBeyondItsSegmentIsRefused) {
  // 4096 floats, 2 members: rank 1's segment is 8 KiB, 8 chunks of 1 KiB.
  Outcome outcome = ForgeThenCall("reduced", 4096, [](std::byte* block) {
    Entered(block, 4096);
    SetWord(block, layout::kReduced, 9);
  });
  ExpectRefused(outcome, absl::StatusCode::kDataLoss,
                "rank 1 wrote 9 into its reduced-chunks counter, outside [0, 8]");
}

TEST(HostAllReduceHostileTest, ADoneFlagAheadOfTheCallIsRefused) {
  Outcome outcome = ForgeThenCall("done", 100, [](std::byte* block) {
    Entered(block, 100);
    SetWord(block, layout::kDone, 5);
  });
  ExpectRefused(outcome, absl::StatusCode::kDataLoss, "rank 1 wrote done flag 5");
}

TEST(HostAllReduceHostileTest, APeerThatGaveUpIsNotTrusted) {
  // A member that gave up in a call marks its done word: whatever a peer
  // read from its buffer may have changed since, so the peer fails too
  // instead of returning that data as the sum.
  Outcome outcome = ForgeThenCall("aborted", 100, [](std::byte* block) {
    Entered(block, 100);
    SetWord(block, layout::kDone, 1 | layout::kAborted);
  });
  ExpectRefused(outcome, absl::StatusCode::kAborted, "rank 1 gave up during its call 1");
}

// Rank 1 says its range lies in its process memory, at an address that is
// not mapped there (page zero) or whose range wraps the address space.
TEST(HostAllReduceHostileTest, AForgedAddressOfProcessMemoryIsDataLoss) {
  Outcome unmapped = ForgeThenCall("unmapped", 100, [](std::byte* block) {
    SetWord(block, layout::kExternal, 64);
    Entered(block, 100);
  });
  ExpectRefused(unmapped, absl::StatusCode::kDataLoss, "of rank 1's memory");
  Outcome wraps = ForgeThenCall("wraps", 100, [](std::byte* block) {
    SetWord(block, layout::kExternal, ~uint64_t{0} - 100);
    Entered(block, 100);
  });
  ExpectRefused(wraps, absl::StatusCode::kDataLoss, "which wraps the address space");
  // The same on the scatter-gather path (1 KiB chunks).
  Outcome chunked = ForgeThenCall("unmapped_sg", 4096, [](std::byte* block) {
    SetWord(block, layout::kExternal, 64);
    Entered(block, 4096);
  });
  ExpectRefused(chunked, absl::StatusCode::kDataLoss, "of rank 1's memory");
}

// The same address on a broadcast from rank 1 (rank 0 copies its range),
// and on an empty call, which reads nothing and ends normally (no read of
// an empty range, however forged its address).
TEST(HostAllReduceHostileTest, AForgedAddressOnABroadcastOrAnEmptyCall) {
  Outcome broadcast = ForgeThenCall(
      "external_root", 400,
      [](std::byte* block) {
        SetWord(block, layout::kExternal, 64);
        Entered(block, 400);
        SetWord(block, layout::kTypeOp, call_word::Pack(layout::kBroadcastCall, 1, DataType{},
                                                        ReduceOp{}, 0));
      },
      [](HostAllReduce& host) { return host.Broadcast(0, 400, 1); });
  ExpectRefused(broadcast, absl::StatusCode::kDataLoss, "of rank 1's memory");
  Outcome empty = ForgeThenCall("external_empty", 0, [](std::byte* block) {
    SetWord(block, layout::kExternal, 64);
    Entered(block, 0);
    SetWord(block, layout::kDone, 1);
  });
  EXPECT_OK(empty.call);
  EXPECT_THAT(empty.again, StatusIs(absl::StatusCode::kDeadlineExceeded,
                                    HasSubstr("entry (rank 1) in call 2")));
}

// Rank 1 refused reads of its process memory at set-up, then publishes an
// address there anyway.
TEST(HostAllReduceHostileTest, AnAddressOfProcessMemoryWithoutTheAgreementIsDataLoss) {
  std::vector<float> honest(100, 1.0f);  // mapped and readable: still refused
  Outcome outcome = ForgeThenCall(
      "unagreed", 100,
      [&](std::byte* block) {
        SetWord(block, layout::kExternal, reinterpret_cast<uintptr_t>(honest.data()));
        Entered(block, 100);
      },
      nullptr, "rank 1 refuses: a test");
  ExpectRefused(outcome, absl::StatusCode::kDataLoss, "did not agree on such reads");
}

// Rank 1 publishes a buffer of its process memory (1.0s) and a shared
// segment for it, which holds 2.0s where the words point: rank 0 (3.0s)
// sums 5.0s where it mapped the segment, 4.0s where it read the address
// instead. Segment words are a hint: forged ones (another token, an
// unsealed memfd, an offset past the segment's end, descriptors that are
// none) end in a read of the address, counted, the first refusal kept.
TEST(HostAllReduceHostileTest, AForgedSegmentIsReadOutOfTheProcessInstead) {
  constexpr size_t kCount = 100;
  std::vector<float> honest(kCount, 1.0f);
  ASSERT_OK_AND_ASSIGN(std::byte* segment, SharedSegments::Process().Allocate(4096));
  const absl::Cleanup release = [&] { SharedSegments::Process().Release(segment); };
  std::fill_n(reinterpret_cast<float*>(segment), 4096 / 4, 2.0f);
  const SegmentRef real = *SharedSegments::Process().Find(segment, 4096);
  const uint64_t unsealed_token = 0xfeed;
  UniqueFd unsealed(memfd_create(SegmentName(unsealed_token).c_str(), MFD_CLOEXEC));
  ASSERT_GE(unsealed.get(), 0);
  ASSERT_EQ(ftruncate(unsealed.get(), 4096), 0);
  struct Case {
    std::string name;
    uint64_t fd_word, token, offset;
    float sum;
    std::string refusal;
    int64_t mapped = 0;  // the real segment mapped (its offset refused, or used)
  };
  const uint64_t fd_word = static_cast<uint64_t>(real.fd) + 1;
  const std::vector<Case> cases = {
      {"segment_honest", fd_word, real.token, 0, 5.0f, "", 1},
      {"segment_token", fd_word, real.token + 1, 0, 4.0f, "not its published segment"},
      {"segment_unsealed", static_cast<uint64_t>(unsealed.get()) + 1, unsealed_token, 0, 4.0f,
       "not sealed"},
      {"segment_offset", fd_word, real.token, 4096 - 396, 4.0f, "bytes at offset 3700", 1},
      {"segment_offset_wraps", fd_word, real.token, ~uint64_t{0} - 3, 4.0f, "bytes at offset",
       1},
      {"segment_fd_huge", uint64_t{1} << 40, real.token, 0, 4.0f, "forged"},
      {"segment_fd_negative", ~uint64_t{0}, real.token, 0, 4.0f, "forged"},
      {"segment_fd_closed", uint64_t{1} << 30, real.token, 0, 4.0f, "cannot open"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<float> own;
    HostAllReduceStats stats;
    std::string refusal;
    int calls = 0;
    Outcome outcome = ForgeThenCall(
        c.name, kCount,
        [&](std::byte* block) {
          SetWord(block, layout::kExternal, reinterpret_cast<uintptr_t>(honest.data()));
          SetWord(block, layout::kSegmentFd, c.fd_word);
          SetWord(block, layout::kSegmentToken, c.token);
          SetWord(block, layout::kSegmentOffset, c.offset);
          Entered(block, kCount);
          SetWord(block, layout::kDone, 1);
        },
        [&](HostAllReduce& host) -> absl::Status {
          if (calls++ > 0) return absl::OkStatus();  // the one call rank 1 made
          own.assign(kCount, 3.0f);
          absl::Status status = host.AllReduceExternal(reinterpret_cast<std::byte*>(own.data()),
                                                       kCount, DataType::kFloat32);
          stats = host.stats();
          refusal = host.segment_refusal();
          return status;
        });
    ASSERT_OK(outcome.call);
    EXPECT_THAT(own, ::testing::Each(c.sum));
    EXPECT_EQ(stats.segment_fallbacks, c.refusal.empty() ? 0 : 1);
    EXPECT_EQ(stats.segments_mapped, c.mapped);
    EXPECT_EQ(stats.process_reads, c.refusal.empty() ? 0 : 1);
    if (!c.refusal.empty()) {
      EXPECT_THAT(refusal, AllOf(HasSubstr("rank 1"), HasSubstr(c.refusal)));
    }
  }
}

// The racing case: rank 1 flips its segment offset between two honest
// ranges (2.0s at 0, 5.0s at 512) and two forged ones while rank 0 calls
// again and again. The words are loaded once per call: every call sums
// one whole range (5.0s, 8.0s), or falls back to the address (4.0s);
// never a mix, never a read past the segment.
TEST(HostAllReduceHostileTest, ASegmentOffsetFlippingWithForgedOnesReadsOneRange) {
  constexpr size_t kCount = 100;
  std::vector<float> honest(kCount, 1.0f);
  ASSERT_OK_AND_ASSIGN(std::byte* segment, SharedSegments::Process().Allocate(4096));
  const absl::Cleanup release = [&] { SharedSegments::Process().Release(segment); };
  auto* floats = reinterpret_cast<float*>(segment);
  std::fill_n(floats, 4096 / 4, -1000.0f);
  std::fill_n(floats, kCount, 2.0f);
  std::fill_n(floats + 128, kCount, 5.0f);
  const SegmentRef real = *SharedSegments::Process().Find(segment, 4096);
  std::byte* block = nullptr;
  std::map<float, int64_t> sums;
  absl::Status failed;
  int calls = 0;
  Outcome outcome = ForgeThenCall(
      "segment_race", kCount,
      [&](std::byte* control) {
        block = control;
        SetWord(block, layout::kExternal, reinterpret_cast<uintptr_t>(honest.data()));
        SetWord(block, layout::kSegmentFd, static_cast<uint64_t>(real.fd) + 1);
        SetWord(block, layout::kSegmentToken, real.token);
        Entered(block, kCount);
        SetWord(block, layout::kEntered, 0);
      },
      [&](HostAllReduce& host) -> absl::Status {
        if (calls++ > 0) return absl::OkStatus();
        std::vector<std::vector<std::byte>> images;
        for (uint64_t offset : {uint64_t{0}, uint64_t{512}, uint64_t{4096 - 396},
                                ~uint64_t{0} - 3}) {
          images.push_back(rdma::testing::BytesOf(offset));
        }
        auto writer = rdma::testing::RacingWriter::Flipping(
            absl::MakeSpan(block + layout::kSegmentOffset, 8), 0, images,
            rdma::testing::RacingWriter::Tearing::kWords);
        std::vector<float> own(kCount);
        // 200 calls, and more (for up to 20 s, on a loaded machine) until
        // both endings were seen 20 times.
        const absl::Time end = absl::Now() + absl::Seconds(20);
        auto more = [&](uint64_t call) {
          const bool both = sums[4.0f] >= 20 && sums[5.0f] + sums[8.0f] >= 20;
          return call <= 200 || (!both && absl::Now() < end);
        };
        for (uint64_t call = 1; more(call); ++call) {
          SetWord(block, layout::kEntered, call);
          SetWord(block, layout::kDone, call);
          std::fill(own.begin(), own.end(), 3.0f);
          RETURN_IF_ERROR(host.AllReduceExternal(reinterpret_cast<std::byte*>(own.data()),
                                                 kCount, DataType::kFloat32));
          if (std::count(own.begin(), own.end(), own[0]) != static_cast<ptrdiff_t>(kCount) ||
              (own[0] != 4.0f && own[0] != 5.0f && own[0] != 8.0f)) {
            return absl::InternalError(absl::StrCat("call ", call, " summed ", own[0],
                                                    " and others"));
          }
          ++sums[own[0]];
        }
        return absl::OkStatus();
      });
  ASSERT_OK(outcome.call);
  EXPECT_GT(sums[4.0f], 0);
  EXPECT_GT(sums[5.0f] + sums[8.0f], 0);
  ::testing::Test::RecordProperty("fallbacks", static_cast<int>(sums[4.0f]));
}

}  // namespace
}  // namespace rdmaflow::collectives
