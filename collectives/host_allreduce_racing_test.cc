// File: host_allreduce_racing_test.cc
// HostAllReduce against a same-host peer that rewrites its published call
// record while rank 0 reads it through its mapping
// (rdma/testing/racing_writer.h). Rank 1 is played by hand, as in
// host_allreduce_hostile_test: for each of rank 0's calls its control block
// says it entered the call (count 100 float32, sum) and is done with it,
// while a racing writer flips its published offset between two honest ones
// (0 and 512, where its data holds 1.0 and 2.0) and forged ones (misaligned,
// or a range that passes its region's end). The offset is loaded once,
// checked, and only the copy locates rank 1's range: every call ends with
// the sum of rank 1's range at one honest offset, every element alike, or
// kDataLoss quoting a forged offset and naming rank 1; never a read past
// the region (AddressSanitizer) or a sum mixed from two places. The same
// for the address of its range in its process memory (kExternal), read
// with process_vm_readv.
#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "collectives/host_allreduce.h"
#include "collectives/peer_process.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "onesided/progress/progress_loop.h"
#include "rdma/rendezvous.h"
#include "rdma/testing/racing_writer.h"
#include "rdma/testing/rank_threads.h"

namespace rdmaflow::collectives {
namespace {

namespace layout = host_allreduce_layout;
using ::rdmaflow::rdma::testing::BytesOf;
using ::rdmaflow::rdma::testing::QuotedAfter;
using ::rdmaflow::rdma::testing::RaceOptions;
using ::rdmaflow::rdma::testing::RaceParse;
using ::rdmaflow::rdma::testing::RaceTally;
using ::rdmaflow::rdma::testing::RacingWriter;
using ::rdmaflow::rdma::testing::RunRankThreads;

constexpr char kNs[] = "host_racing_test";
constexpr size_t kCapacity = 64 << 10;
constexpr size_t kCount = 100;  // float32: 400 bytes

HostAllReduceOptions Options(const std::string& name, onesided::ProgressLoop* loop) {
  HostAllReduceOptions options;
  options.name = name;
  options.one_shot_max_bytes = 1 << 10;
  options.chunk_bytes = 1 << 10;
  options.timeout = absl::Seconds(5);  // a forgery that went unnoticed stalls
  options.loop = loop;
  return options;
}

void SetWord(std::byte* block, size_t offset, uint64_t value) {
  __atomic_store_n(reinterpret_cast<uint64_t*>(block + offset), value, __ATOMIC_RELEASE);
}

// Rank 1's regions, which rank 0's thread publishes under each name (a
// refused call leaves rank 0's collective unusable: the next call is made
// by a fresh one) and its racing writer rewrites.
struct HandPlayedMember {
  std::optional<rdma::MemoryRegion> data, control;
};

// Races rank 0's calls against a writer that flips rank 1's control word
// at `word` between `honest(data)` (two values that locate its range of
// 1.0s and of 2.0s in its data region `data`) and `forged`; `refused(status)`
// says whether a kDataLoss names a forged value. The tally of the calls.
RaceTally RaceOn(const std::string& prefix, size_t word,
                 const std::function<std::vector<uint64_t>(const std::byte* data)>& honest,
                 const std::vector<uint64_t>& forged,
                 const std::function<bool(const absl::Status&)>& refused) {
  HandPlayedMember member;
  const std::string ready = absl::StrCat(kNs, "/ready");
  const std::string judged = absl::StrCat(kNs, "/judged");
  RaceTally tally;
  int64_t creates = 0;
  std::vector<absl::Status> results = RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        if (rank == 1) {
          ASSIGN_OR_RETURN(rdma::MemoryRegion data, transport.Allocate(kCapacity));
          ASSIGN_OR_RETURN(rdma::MemoryRegion control, transport.Allocate(layout::kBytes));
          std::memset(control.data(), 0, control.size());
          float* values = reinterpret_cast<float*>(data.data());
          std::fill(values, values + kCapacity / 4, -1000.0f);
          std::fill(values, values + kCount, 1.0f);            // at offset 0
          std::fill(values + 128, values + 128 + kCount, 2.0f);  // at offset 512
          member.data.emplace(std::move(data));
          member.control.emplace(std::move(control));
          RETURN_IF_ERROR(rdma::PublishAddress(store, kNs, transport));
          RETURN_IF_ERROR(store.Set(ready, "1"));
          // Rank 1's memory stays until rank 0 (and its writer) are done.
          return store.Wait({judged}, absl::Seconds(120));
        }
        onesided::ProgressLoop loop(transport, {});
        ASSIGN_OR_RETURN(rdma::MemoryRegion data, transport.Allocate(kCapacity));
        RETURN_IF_ERROR(store.Wait({ready}, absl::Seconds(30)));
        std::byte* block = member.control->data();
        std::unique_ptr<HostAllReduce> host;
        uint64_t call = 0;
        absl::Status setup;
        auto fresh = [&]() -> absl::Status {
          host.reset();
          const std::string name = absl::StrCat(prefix, creates++);
          const HostAllReduceOptions options = Options(name, &loop);
          const std::string key = absl::StrCat("host/", name, "/1/");
          RETURN_IF_ERROR(store.Set(absl::StrCat(kNs, "/", key, "layout"),
                                    HostAllReduce::LayoutText(options, kCapacity, {0, 1})));
          RETURN_IF_ERROR(
              rdma::PublishRegion(store, kNs, key + "data", member.data->descriptor()));
          RETURN_IF_ERROR(
              rdma::PublishRegion(store, kNs, key + "control", member.control->descriptor()));
          RETURN_IF_ERROR(store.Set(absl::StrCat(kNs, "/", key, "mapped"), "ok"));
          RETURN_IF_ERROR(store.Set(absl::StrCat(kNs, "/", key, "process"),
                                    FormatProcessToken(OwnProcessToken())));
          RETURN_IF_ERROR(store.Set(absl::StrCat(kNs, "/", key, "external"), "ok"));
          for (size_t word : {layout::kEntered, layout::kDone, layout::kReduced}) {
            SetWord(block, word, 0);
          }
          call = 0;
          ASSIGN_OR_RETURN(host,
                           HostAllReduce::Create(transport, store, kNs, {0, 1}, data, options));
          return absl::OkStatus();
        };
        // One call of rank 0's: rank 1 entered it and is done with it.
        auto one_call = [&]() -> absl::Status {
          if (host == nullptr) {
            if (absl::Status made = fresh(); !made.ok()) {
              if (setup.ok()) setup = made;
              return absl::InternalError(absl::StrCat("set-up: ", made.ToString()));
            }
          }
          ++call;
          SetWord(block, layout::kCount, kCount);
          SetWord(block, layout::kTypeOp, 0);  // float32 << 8 | sum
          SetWord(block, layout::kEntered, call);
          SetWord(block, layout::kDone, call);
          std::memset(data.data(), 0, kCount * 4);
          absl::Status status = host->AllReduce(0, kCount, DataType::kFloat32);
          if (!status.ok()) {
            host.reset();  // unusable now
            if (status.code() != absl::StatusCode::kDataLoss) return status;
            if (!refused(status)) {
              return absl::InternalError(
                  absl::StrCat("refused quoting a value never forged: ", status.message()));
            }
            return status;
          }
          const float* sum = reinterpret_cast<const float*>(data.data());
          for (size_t i = 0; i < kCount; ++i) {
            if (sum[i] != sum[0] || (sum[0] != 1.0f && sum[0] != 2.0f)) {
              return absl::InternalError(absl::StrCat("element ", i, " summed to ", sum[i],
                                                      ", element 0 to ", sum[0]));
            }
          }
          return absl::OkStatus();
        };
        // Raced again (a fresh writer) until both endings were seen many
        // times: on a loaded machine the writer and the reader may take
        // turns on one core, and a writer starting late leaves a race with
        // one ending.
        RaceOptions options;
        options.min_calls = 200;
        options.min_writer_rounds = 200;
        const std::vector<uint64_t> honest_values = honest(member.data->data());
        std::vector<std::vector<std::byte>> values;
        for (uint64_t value : honest_values) values.push_back(BytesOf(value));
        for (uint64_t value : forged) values.push_back(BytesOf(value));
        for (int race = 0; race < 50 && (tally.ok < 50 || tally.data_loss < 50); ++race) {
          SetWord(block, word, honest_values[0]);
          auto writer = RacingWriter::Flipping(absl::MakeSpan(block + word, 8), 0, values,
                                               RacingWriter::Tearing::kWords);
          const RaceTally race_tally = RaceParse(*writer, one_call, options);
          tally.calls += race_tally.calls;
          tally.ok += race_tally.ok;
          tally.data_loss += race_tally.data_loss;
          if (tally.other == 0) tally.first_other = race_tally.first_other;
          tally.other += race_tally.other;
        }
        host.reset();
        EXPECT_OK(setup);
        return store.Set(judged, "1");
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
  return tally;
}

void ExpectOneHonestRangeOrRefused(const RaceTally& tally) {
  EXPECT_EQ(tally.other, 0) << tally.first_other;
  EXPECT_EQ(tally.ok + tally.data_loss, tally.calls);
  EXPECT_GT(tally.ok, 0);
  EXPECT_GT(tally.data_loss, 0);
  ::testing::Test::RecordProperty("calls", static_cast<int>(tally.calls));
  ::testing::Test::RecordProperty("refused", static_cast<int>(tally.data_loss));
}

TEST(HostAllReduceRacingTest, AnOffsetFlippingWithForgedOnesLocatesOneHonestRange) {
  const std::vector<uint64_t> forged = {2, kCapacity - 396, ~uint64_t{0} - 3};
  ExpectOneHonestRangeOrRefused(RaceOn(
      "race", layout::kOffset,
      [](const std::byte*) { return std::vector<uint64_t>{0, 512}; }, forged,
      [&](const absl::Status& status) {
        const std::optional<uint64_t> quoted =
            QuotedAfter(status.message(), "rank 1 published offset ");
        return quoted.has_value() &&
               std::find(forged.begin(), forged.end(), *quoted) != forged.end();
      }));
}

// The same for the address of a range in rank 1's process memory (read
// with process_vm_readv): flipping between its two honest ranges, page
// zero and a range that wraps the address space.
TEST(HostAllReduceRacingTest, AProcessAddressFlippingWithForgedOnesLocatesOneHonestRange) {
  ExpectOneHonestRangeOrRefused(RaceOn(
      "race_external", layout::kExternal,
      [](const std::byte* data) {
        const auto at = reinterpret_cast<uintptr_t>(data);
        return std::vector<uint64_t>{at, at + 512};
      },
      {64, ~uint64_t{0} - 3},
      [](const absl::Status& status) {
        return absl::StrContains(status.message(), "bytes at 0x40 of rank 1's memory") ||
               absl::StrContains(status.message(), "which wraps the address space");
      }));
}

}  // namespace
}  // namespace rdmaflow::collectives
