// The ring all-reduce against a hostile neighbour: rank 1 of a 2-member
// ring (both neighbours of rank 0) creates its ring like any member, then
// writes forged flag and credit words straight into rank 0's control region
// with a raw endpoint. Each forged value (a flag from the future, one going
// back, random ones; a credit releasing messages never sent, one going
// back) fails rank 0's call with kDataLoss naming rank 1, before the value
// moves anything; the ring is then unusable and its Shutdown returns within
// its bound.
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/ring_allreduce.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/rendezvous.h"
#include "rdma/testing/rank_threads.h"

namespace rdmaflow::collectives {
namespace {

using ::rdmaflow::rdma::testing::RunRankThreads;
using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kNs[] = "ring_hostile_test";
constexpr int kSlots = 2;
constexpr size_t kCount = 1024;  // floats: 64 messages per call and link
constexpr uint64_t kMax = ~uint64_t{0};

RingAllReduceOptions Options(const std::string& name) {
  RingAllReduceOptions options;
  options.name = name;
  options.capacity_bytes = kCount * 4;
  options.chunk_bytes = 64;
  options.slots = kSlots;
  // Where a forged value went unnoticed, the call stalls: fail fast.
  options.timeout = absl::Seconds(2);
  return options;
}

// Rank 1's raw access to rank 0's control region (layout: ring_allreduce.cc:
// flag words [0, slots), then the credit word).
class Attacker {
 public:
  static absl::StatusOr<std::unique_ptr<Attacker>> Connect(rdma::Transport& transport,
                                                           rdma::Store& store,
                                                           const std::string& name) {
    auto a = std::unique_ptr<Attacker>(new Attacker(transport));
    ASSIGN_OR_RETURN(a->endpoint_,
                     rdma::ConnectToPeer(transport, store, kNs, 0, absl::Seconds(20)));
    ASSIGN_OR_RETURN(a->control_, rdma::FetchRegion(store, kNs,
                                                    absl::StrCat("ring/", name, "/0/control"),
                                                    absl::Seconds(20)));
    ASSIGN_OR_RETURN(rdma::MemoryRegion scratch, transport.Allocate(64));
    a->scratch_ = std::make_unique<rdma::MemoryRegion>(std::move(scratch));
    return a;
  }

  // The flag word of the slot of message `seq`.
  absl::Status Flag(uint64_t seq, uint64_t value) { return Word((seq % kSlots) * 8, value); }
  absl::Status Credit(uint64_t value) { return Word(kSlots * 8, value); }

 private:
  explicit Attacker(rdma::Transport& transport) : transport_(transport) {}

  absl::Status Word(uint64_t offset, uint64_t value) {
    std::memcpy(scratch_->data(), &value, 8);
    std::optional<absl::Status> done;
    RETURN_IF_ERROR(endpoint_->PostWrite({scratch_.get(), 0, 8}, {&control_, offset, 8},
                                         std::nullopt, [&](absl::Status s) { done = s; }));
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (!done.has_value()) {
      RETURN_IF_ERROR(transport_.Progress().status());
      if (absl::Now() > deadline) return absl::DeadlineExceededError("attacker write");
    }
    return *done;
  }

  rdma::Transport& transport_;
  std::unique_ptr<rdma::Endpoint> endpoint_;
  rdma::RemoteRegion control_;
  std::unique_ptr<rdma::MemoryRegion> scratch_;
};

struct Outcome {
  absl::Status call;       // rank 0's call after the forgery
  absl::Status again;      // a call after that
  absl::Status shutdown;
};

// Both ranks run `honest_calls` all-reduces; then rank 1 forges with
// `forge` and rank 0 calls once more.
Outcome ForgeThenCall(const std::string& name, int honest_calls,
                      const std::function<absl::Status(Attacker&)>& forge) {
  Outcome outcome;
  const std::string forged = absl::StrCat(kNs, "/", name, "/forged");
  const std::string judged = absl::StrCat(kNs, "/", name, "/judged");
  const std::string honest = absl::StrCat(kNs, "/", name, "/honest");
  std::vector<absl::Status> results = RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        ASSIGN_OR_RETURN(auto ring,
                         RingAllReduce::Create(transport, store, kNs, {0, 1}, Options(name)));
        for (int i = 0; i < honest_calls; ++i) {
          RETURN_IF_ERROR(ring->AllReduce(0, kCount, DataType::kFloat32));
        }
        if (rank == 1) {
          ASSIGN_OR_RETURN(auto attacker, Attacker::Connect(transport, store, name));
          // Not before rank 0 is done with the honest calls.
          RETURN_IF_ERROR(store.Wait({honest}, absl::Seconds(30)));
          RETURN_IF_ERROR(forge(*attacker));
          RETURN_IF_ERROR(store.Set(forged, "1"));
          return store.Wait({judged}, absl::Seconds(30));
        }
        RETURN_IF_ERROR(store.Set(honest, "1"));
        RETURN_IF_ERROR(store.Wait({forged}, absl::Seconds(30)));
        outcome.call = ring->AllReduce(0, kCount, DataType::kFloat32);
        outcome.again = ring->AllReduce(0, kCount, DataType::kFloat32);
        // Rank 1 never comes to the barrier: bounded by the limit given.
        outcome.shutdown = ring->Shutdown(absl::Milliseconds(100));
        return store.Set(judged, "1");
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
  return outcome;
}

void ExpectRefused(const Outcome& outcome, const std::string& expected) {
  EXPECT_THAT(outcome.call,
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(expected), HasSubstr("on rank 0"))));
  EXPECT_THAT(outcome.again,
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("unusable")));
  EXPECT_FALSE(outcome.shutdown.ok());
}

TEST(RingAllReduceHostileTest, FlagsOutsideTheWindowAreRefused) {
  // Before the first call, slot 0 may hold 0 (nothing yet) or 1 (message 0).
  std::vector<uint64_t> values = {2, 3, kSlots + 1, 64, uint64_t{1} << 63, kMax};
  std::mt19937_64 rng(99);
  for (int i = 0; i < 6; ++i) {
    uint64_t v = rng();
    values.push_back(v > 1 ? v : 2);
  }
  int n = 0;
  for (uint64_t value : values) {
    SCOPED_TRACE(absl::StrCat("flag ", value));
    Outcome outcome = ForgeThenCall(absl::StrCat("flag", n++), 0, [&](Attacker& a) {
      return a.Flag(0, value);
    });
    ExpectRefused(outcome, absl::StrCat("rank 1 (the left neighbour) wrote ", value,
                                        " into the flag of slot 0 where 1"));
  }
}

TEST(RingAllReduceHostileTest, AFlagGoingBackIsRefused) {
  // After one call (64 messages), message 64's slot holds 63 (message 62's
  // flag) until 65 arrives; 62 is from an older use.
  Outcome outcome = ForgeThenCall("back", 1, [](Attacker& a) { return a.Flag(64, 62); });
  ExpectRefused(outcome, "wrote 62 into the flag of slot 0 where 65 (message 1 of 64 of "
                         "this call) or, before it, 63 was due");
}

TEST(RingAllReduceHostileTest, ACreditReleasingUnsentMessagesIsRefused) {
  Outcome outcome = ForgeThenCall("credit", 0, [](Attacker& a) { return a.Credit(1000); });
  ExpectRefused(outcome, "rank 1 (the right neighbour) wrote a credit releasing 1000 "
                         "messages, but only 0 were sent");
}

TEST(RingAllReduceHostileTest, ACreditGoingBackIsRefused) {
  Outcome outcome = ForgeThenCall("credit_back", 1, [](Attacker& a) { return a.Credit(0); });
  ExpectRefused(outcome, "wrote a credit of 0 after");
}

}  // namespace
}  // namespace rdmaflow::collectives
