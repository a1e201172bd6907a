// The zero-copy executor when a one-sided READ of a dynamic tensor does not
// complete: the sender's NIC or process stops answering (FaultyTransport
// kDrop: the completion fires only when the endpoint is closed), or, worse,
// not even closing the link brings the completion back (held by the test).
// Giving up must fence the READ before its destination is freed: the
// receive fails with kDeadlineExceeded naming the sender and the read, no
// memory the READ may still write is handed to another tensor or freed, the
// sender is not told that the undelivered tensor was released, and the
// executor stays failed.
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "graph_analyzer/graph_builder.h"
#include "graph_analyzer/planner.h"
#include "gtest/gtest.h"
#include "rdma/testing/faulty_transport.h"
#include "runtime/executor.h"
#include "runtime/replay.h"
#include "runtime/testing/rank_threads.h"

namespace rdmaflow::runtime {
namespace {

using ::rdmaflow::rdma::testing::FaultyTransport;
using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kNs[] = "executor_slow_peer_test";
constexpr int64_t kElements = 1024;  // 4 KiB: exactly the receiver's pool
constexpr size_t kBytes = kElements * 4;

// A Transport decorator that watches the local memory of operations in
// flight: a region from Allocate() destroyed while an operation reads or
// writes it is a violation (the use-after-free a late completion would
// cause on a NIC). With `hold_reads`, the completions of reads are kept
// even past Close() (a NIC that never flushes them) until Release().
// Thread-compatible, like the transport it wraps.
class TrackingTransport final : public rdma::Transport {
 public:
  explicit TrackingTransport(rdma::Transport& inner)
      : inner_(inner), state_(std::make_shared<State>()) {}

  void hold_reads() { state_->hold_reads = true; }
  // Fires the held completions from the next Progress().
  void Release() {
    state_->hold_reads = false;
    state_->release = true;
  }
  int64_t held() const { return static_cast<int64_t>(state_->held.size()); }
  const std::vector<std::string>& violations() const { return state_->violations; }
  // Whether [data, data + bytes) meets the local memory of a read in flight.
  bool OverlapsReadInFlight(const std::byte* data, size_t bytes) const {
    for (const auto& [id, op] : state_->in_flight) {
      if (op.read && data < op.begin + op.length && op.begin < data + bytes) return true;
    }
    return false;
  }

  int rank() const override { return inner_.rank(); }
  rdma::Capabilities capabilities() const override { return inner_.capabilities(); }
  std::string address() const override { return inner_.address(); }
  absl::StatusOr<rdma::MemoryRegion> Allocate(size_t bytes) override {
    ASSIGN_OR_RETURN(rdma::MemoryRegion region, inner_.Allocate(bytes));
    std::byte* data = region.data();
    const size_t size = region.size();
    rdma::RemoteRegion descriptor = region.descriptor();
    return rdma::MemoryRegion(
        data, size, std::move(descriptor),
        std::make_unique<Watched>(state_, std::move(region)));
  }
  absl::StatusOr<rdma::MemoryRegion> Register(absl::Span<std::byte> memory) override {
    return inner_.Register(memory);
  }
  absl::StatusOr<std::unique_ptr<rdma::Endpoint>> Connect(
      const rdma::PeerInfo& peer) override {
    ASSIGN_OR_RETURN(std::unique_ptr<rdma::Endpoint> inner, inner_.Connect(peer));
    return std::unique_ptr<rdma::Endpoint>(new TrackedEndpoint(state_, std::move(inner)));
  }
  absl::StatusOr<int> Progress() override {
    absl::StatusOr<int> fired = inner_.Progress();
    if (state_->release) {
      state_->release = false;
      std::vector<Held> held = std::move(state_->held);
      state_->held.clear();
      for (Held& h : held) {
        state_->in_flight.erase(h.id);
        std::move(h.done)(std::move(h.status));
      }
    }
    return fired;
  }
  std::optional<rdma::Notification> PollNotification() override {
    return inner_.PollNotification();
  }

 private:
  struct Op {
    bool read;
    const std::byte* begin;
    size_t length;
  };
  struct Held {
    int64_t id;
    rdma::Completion done;
    absl::Status status;
  };
  struct State {
    bool hold_reads = false;
    bool release = false;
    int64_t next_id = 0;
    std::map<int64_t, Op> in_flight;
    std::vector<Held> held;
    std::vector<std::string> violations;
  };

  // Owns the inner registration; checks, when destroyed, that nothing in
  // flight still uses the memory.
  class Watched final : public rdma::MemoryRegion::Registration {
   public:
    Watched(std::shared_ptr<State> state, rdma::MemoryRegion inner)
        : state_(std::move(state)), inner_(std::move(inner)) {}
    ~Watched() override {
      const std::byte* begin = inner_.data();
      const std::byte* end = begin + inner_.size();
      for (const auto& [id, op] : state_->in_flight) {
        if (op.begin < end && begin < op.begin + op.length) {
          state_->violations.push_back(absl::StrCat(
              "a region of ", inner_.size(), " bytes was freed while a ",
              op.read ? "read into" : "write from", " it was in flight"));
        }
      }
    }

   private:
    std::shared_ptr<State> state_;
    rdma::MemoryRegion inner_;
  };

  class TrackedEndpoint final : public rdma::Endpoint {
   public:
    TrackedEndpoint(std::shared_ptr<State> state, std::unique_ptr<rdma::Endpoint> inner)
        : state_(std::move(state)), inner_(std::move(inner)) {}
    int peer_rank() const override { return inner_->peer_rank(); }
    absl::Status PostWrite(const rdma::LocalSlice& src, const rdma::RemoteSlice& dst,
                           std::optional<uint32_t> notification,
                           rdma::Completion done) override {
      return Track(false, src, std::move(done), [&](rdma::Completion wrapped) {
        return inner_->PostWrite(src, dst, notification, std::move(wrapped));
      });
    }
    absl::Status PostRead(const rdma::LocalSlice& dst, const rdma::RemoteSlice& src,
                          rdma::Completion done) override {
      return Track(true, dst, std::move(done), [&](rdma::Completion wrapped) {
        return inner_->PostRead(dst, src, std::move(wrapped));
      });
    }
    absl::Status PostFlush(rdma::Completion done) override {
      return inner_->PostFlush(std::move(done));
    }
    absl::Status Close() override { return inner_->Close(); }

   private:
    template <typename PostFn>
    absl::Status Track(bool read, const rdma::LocalSlice& local, rdma::Completion done,
                       PostFn post) {
      const int64_t id = state_->next_id++;
      absl::Status posted = post([state = state_, id, read,
                                  done = std::move(done)](absl::Status s) mutable {
        if (read && state->hold_reads) {
          state->held.push_back({id, std::move(done), std::move(s)});
          return;
        }
        state->in_flight.erase(id);
        std::move(done)(std::move(s));
      });
      if (posted.ok()) state_->in_flight[id] = Op{read, local.data(), local.length};
      return posted;
    }

    std::shared_ptr<State> state_;
    std::unique_ptr<rdma::Endpoint> inner_;
  };

  rdma::Transport& inner_;
  std::shared_ptr<State> state_;
};

plan::TransferPlan DynamicPlan() {
  graph::GraphBuilder b("one_tensor");
  b.SetWorldSize(2);
  b.SetRank(0);
  std::string x = b.Placeholder("x", graph::DT_FLOAT32, {-1});
  b.SetRank(1);
  b.Op("y", "Identity", {x});
  absl::StatusOr<plan::TransferPlan> plan = graph::PlanGraph(std::move(b).Build(), {});
  EXPECT_OK(plan.status());
  return *plan;
}

CommunicatorOptions Options(absl::Duration timeout) {
  CommunicatorOptions options;
  options.ns = kNs;
  options.trace_steps = 0;
  options.timeout = timeout;
  // The receiver's pool holds one tensor: a freed range is reused at once.
  options.dynamic_pool_bytes = kBytes;
  return options;
}

struct Result {
  absl::Status first;   // the receive whose read never completes
  absl::Status second;  // a receive after it
  bool second_overlapped = false;
  absl::Status sender_step2;
  std::vector<std::string> violations;
  int64_t held_after_destruction = 0;
};

// Rank 0 sends steps 0 and 1 of a 4 KiB dynamic tensor; rank 1's first read
// is dropped by FaultyTransport (and, with `stuck`, its completion is held
// past Close until the executor is gone).
Result RunWithDroppedRead(bool stuck) {
  const plan::TransferPlan plan = DynamicPlan();
  const int id = plan.link(0).slot(0).id();
  const std::string judged = absl::StrCat(kNs, "/judged");
  const std::string sender_done = absl::StrCat(kNs, "/sender_done");
  Result result;
  std::vector<absl::Status> results = testing::RunRankThreads(
      2, [&](int rank, rdma::Transport& transport, rdma::Store& store) -> absl::Status {
        if (rank == 0) {
          CommunicatorOptions options = Options(absl::Seconds(1));
          options.dynamic_pool_bytes = 4 * kBytes;  // holds both steps
          ASSIGN_OR_RETURN(auto executor, Executor::Create(plan, transport, store, options));
          std::vector<std::byte> data(kBytes);
          for (int step = 0; step < 2; ++step) {
            FillPattern(3, id, step, data.data(), data.size());
            RETURN_IF_ERROR(executor->Send(id, {data.data(), kBytes, {kElements}, nullptr}));
            RETURN_IF_ERROR(executor->FinishStep());
          }
          RETURN_IF_ERROR(store.Wait({judged}, absl::Seconds(30)));
          // Step 2 needs stage 0, i.e. step 0 released: it never was.
          result.sender_step2 = executor->Send(id, {data.data(), kBytes, {kElements}, nullptr});
          executor.reset();
          return store.Set(sender_done, "1");
        }
        FaultyTransport faulty(transport);
        FaultyTransport::Fault drop;
        drop.op = FaultyTransport::Op::kRead;
        drop.peer = 0;
        drop.action = FaultyTransport::Action::kDrop;
        faulty.AddFault(drop);
        TrackingTransport tracking(faulty);
        if (stuck) tracking.hold_reads();
        {
          ASSIGN_OR_RETURN(auto executor, Executor::Create(plan, tracking, store,
                                                           Options(absl::Seconds(1))));
          result.first = executor->Recv(id).status();
          absl::StatusOr<ReceivedTensor> second = executor->Recv(id);
          result.second = second.status();
          if (second.ok()) {
            result.second_overlapped =
                tracking.OverlapsReadInFlight(second->data(), second->bytes());
          }
        }  // the executor is destroyed (with, when stuck, the read still in flight)
        result.held_after_destruction = tracking.held();
        // The read completes at last (what a late NIC completion does).
        tracking.Release();
        for (int i = 0; i < 3; ++i) RETURN_IF_ERROR(tracking.Progress().status());
        result.violations = tracking.violations();
        RETURN_IF_ERROR(store.Set(judged, "1"));
        return store.Wait({sender_done}, absl::Seconds(30));
      });
  for (const absl::Status& status : results) EXPECT_OK(status);
  return result;
}

void ExpectFenced(const Result& result) {
  EXPECT_THAT(result.first,
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("rank 0 has not served the read of step 0"),
                             HasSubstr("tensor 'x:0'"))));
  // No memory the read may still write went to another tensor...
  EXPECT_FALSE(result.second_overlapped);
  // ... because the executor stays failed after giving up.
  EXPECT_THAT(result.second, StatusIs(absl::StatusCode::kDeadlineExceeded));
  // Nothing was freed under the read.
  EXPECT_THAT(result.violations, ::testing::IsEmpty());
  // The undelivered tensor was not released to its sender.
  EXPECT_THAT(result.sender_step2, StatusIs(absl::StatusCode::kDeadlineExceeded,
                                            HasSubstr("rank 1 still holds step 0")));
}

TEST(ExecutorSlowPeerTest, AReadThatNeverCompletesIsCancelledBeforeItsMemoryIsReused) {
  const Result result = RunWithDroppedRead(/*stuck=*/false);
  ExpectFenced(result);
  EXPECT_EQ(result.held_after_destruction, 0);
}

TEST(ExecutorSlowPeerTest, AReadThatCannotBeCancelledKeepsItsMemoryUntilItCompletes) {
  // Closing the link does not bring the completion back: the executor gives
  // up after a bounded wait, and the read's destination stays allocated even
  // past the executor, until the completion fires.
  const Result result = RunWithDroppedRead(/*stuck=*/true);
  ExpectFenced(result);
  EXPECT_EQ(result.held_after_destruction, 1);
}

}  // namespace
}  // namespace rdmaflow::runtime
