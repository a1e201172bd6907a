// File: credit_writer.h
// -----------------------------------------------------------------------------
// CreditWriter: the receiver's half of credit flow control, written once.
// A receiver tells its sender how much it has released by writing counters
// (64-bit words, one per slot or one per link) into the sender's memory.
// The writer keeps the values wanted, and posts ONE write covering every
// word that went up since the last write (from the lowest to the highest
// changed index), with at most one write in flight: a burst of releases
// costs one write, not one per slot.
//
// Values only go up. The source words are rewritten only while no write is
// in flight, so the transport never reads a word that is changing.
//
//   CreditWriter credits({...});
//   credits.Set(slot, released);   // as slots are released
//   RETURN_IF_ERROR(credits.Post());  // each progress round
#ifndef RDMAFLOW_ONESIDED_SLOTS_CREDIT_WRITER_H_
#define RDMAFLOW_ONESIDED_SLOTS_CREDIT_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "rdma/endpoint.h"
#include "rdma/memory_region.h"
#include "rdma/remote_region.h"

namespace rdmaflow::onesided {

// Thread-compatible: the owner's progress thread. Its completion touches
// only state it shares with the writer, so the writer may go first; the
// source region must outlive a write in flight (outstanding() > 0).
class CreditWriter {
 public:
  struct Options {
    int words = 1;
    // To whom, in messages: "rank 2", "rank 2 (the left neighbour)".
    std::string peer;
    rdma::Endpoint* endpoint = nullptr;
    // `words` words of ours the values are written from.
    const rdma::MemoryRegion* source = nullptr;
    size_t source_offset = 0;
    // The sender's `words` words.
    const rdma::RemoteRegion* remote = nullptr;
    uint64_t remote_offset = 0;
    // Called when a write is posted and when it completes, so an owner that
    // counts its operations in flight (runtime::ProgressEngine) counts these
    // too and waits for them before it frees `source`. Either may be unset.
    std::function<void()> started;
    std::function<void()> completed;
  };

  explicit CreditWriter(Options options);

  // Word `index` (in [0, words)) should say `value`; lower values than one
  // already set are ignored.
  void Set(int index, uint64_t value);
  // Posts one write of the changed words unless one is in flight (or the
  // endpoint's queue is full: the next call retries). Returns failure().
  absl::Status Post();

  // Values set and not yet written (or in flight).
  bool pending() const { return lo_ <= hi_ || shared_->busy; }
  int64_t outstanding() const { return shared_->busy ? 1 : 0; }
  int64_t writes() const { return writes_; }
  const absl::Status& failure() const { return shared_->failure; }

 private:
  // What the write's completion updates.
  struct Shared {
    bool busy = false;
    absl::Status failure;
  };

  static void Fail(Shared& shared, const std::string& peer, const absl::Status& status);

  const Options options_;
  std::vector<uint64_t> wanted_;
  int lo_;  // changed indices not yet written: [lo_, hi_], empty when lo_ > hi_
  int hi_ = -1;
  int64_t writes_ = 0;
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
};

}  // namespace rdmaflow::onesided

#endif  // RDMAFLOW_ONESIDED_SLOTS_CREDIT_WRITER_H_
