// File: testing/tracking_transport.h
// -----------------------------------------------------------------------------
// TrackingTransport: a test decorator over a Transport (usually a
// FaultyTransport over loopback) that proves the rule "an operation in
// flight never lands in freed memory" for the component above it. For the
// slow_peer tests of the executor and the ring all-reduce.
#ifndef RDMAFLOW_RDMA_TESTING_TRACKING_TRANSPORT_H_
#define RDMAFLOW_RDMA_TESTING_TRACKING_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "rdma/endpoint.h"
#include "rdma/memory_region.h"
#include "rdma/testing/transport_wrapper.h"
#include "rdma/transport.h"

namespace rdmaflow::rdma::testing {

// A Transport decorator that watches the local memory of operations in
// flight: a region from Allocate() destroyed while an operation reads or
// writes it is a violation (the use-after-free a late completion would
// cause on a NIC). With `hold_reads`, the completions of reads are kept
// even past Close() (a NIC that never flushes them) until Release(); with
// `hold_writes`, those of writes; with `hold_flushes`, those of flushes.
//
//   FaultyTransport faulty(transport);   // e.g. kDrop on reads
//   TrackingTransport tracking(faulty);
//   tracking.hold_reads();
//   ... give `tracking` to the component, make it give up, destroy it ...
//   tracking.Release();  // the late completions fire
//   EXPECT_THAT(tracking.violations(), IsEmpty());
//
// Loopback only: the regions it hands out wrap the inner ones, whose
// registration backends that use lkeys would not find. Thread-compatible,
// like the transport it wraps, which must outlive it.
class TrackingTransport final : public rdma::testing::TransportWrapper {
 public:
  explicit TrackingTransport(rdma::Transport& inner)
      : TransportWrapper(inner), state_(std::make_shared<State>()) {}

  void hold_reads() { state_->hold_reads = true; }
  void hold_writes() { state_->hold_writes = true; }
  void hold_flushes() { state_->hold_flushes = true; }
  // Fires the held completions from the next Progress(), and stops holding.
  void Release() {
    state_->hold_reads = false;
    state_->hold_writes = false;
    state_->hold_flushes = false;
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

  absl::StatusOr<rdma::MemoryRegion> Allocate(size_t bytes) override {
    ASSIGN_OR_RETURN(rdma::MemoryRegion region, inner().Allocate(bytes));
    std::byte* data = region.data();
    const size_t size = region.size();
    rdma::RemoteRegion descriptor = region.descriptor();
    return rdma::MemoryRegion(
        data, size, std::move(descriptor),
        std::make_unique<Watched>(state_, std::move(region)));
  }
  absl::StatusOr<std::unique_ptr<rdma::Endpoint>> Connect(
      const rdma::PeerInfo& peer) override {
    ASSIGN_OR_RETURN(std::unique_ptr<rdma::Endpoint> connected, inner().Connect(peer));
    return std::unique_ptr<rdma::Endpoint>(new TrackedEndpoint(state_, std::move(connected)));
  }
  absl::StatusOr<int> Progress() override {
    absl::StatusOr<int> fired = inner().Progress();
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
    bool hold_writes = false;
    bool hold_flushes = false;
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
    absl::Status PostWriteWithFlag(const rdma::LocalSlice& src, const rdma::RemoteSlice& dst,
                                   const rdma::RemoteSlice& flag_word, uint64_t flag,
                                   rdma::Completion done) override {
      return Track(false, src, std::move(done), [&](rdma::Completion wrapped) {
        return inner_->PostWriteWithFlag(src, dst, flag_word, flag, std::move(wrapped));
      });
    }
    absl::Status PostRead(const rdma::LocalSlice& dst, const rdma::RemoteSlice& src,
                          rdma::Completion done) override {
      return Track(true, dst, std::move(done), [&](rdma::Completion wrapped) {
        return inner_->PostRead(dst, src, std::move(wrapped));
      });
    }
    absl::Status PostFlush(rdma::Completion done) override {
      // Not in flight over any memory: a held one has no id to erase.
      return inner_->PostFlush([state = state_, done = std::move(done)](absl::Status s) mutable {
        if (state->hold_flushes) {
          state->held.push_back({-1, std::move(done), std::move(s)});
          return;
        }
        std::move(done)(std::move(s));
      });
    }
    absl::Status Close() override { return inner_->Close(); }

   private:
    template <typename PostFn>
    absl::Status Track(bool read, const rdma::LocalSlice& local, rdma::Completion done,
                       PostFn post) {
      const int64_t id = state_->next_id++;
      absl::Status posted = post([state = state_, id, read,
                                  done = std::move(done)](absl::Status s) mutable {
        if (read ? state->hold_reads : state->hold_writes) {
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

  std::shared_ptr<State> state_;
};

}  // namespace rdmaflow::rdma::testing

#endif  // RDMAFLOW_RDMA_TESTING_TRACKING_TRANSPORT_H_
