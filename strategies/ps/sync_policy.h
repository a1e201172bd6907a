// File: sync_policy.h
// -----------------------------------------------------------------------------
// The parameter server's synchronization paradigms, as pure functions of the
// workers' clocks (how many gradients each has pushed) and push times:
//   bsp            a worker at clock c waits until every worker pushed c;
//   asp            nobody ever waits;
//   ssp:S          a worker at clock c proceeds while c - min(clocks) <= S;
//   dssp:LOW:HIGH  Dynamic SSP (Zhao et al., ICDCS 2019): like ssp:LOW, but a
//                  worker that reaches the bound may run r more iterations,
//                  0 <= r <= HIGH - LOW, the r whose predicted push lands
//                  closest to the slowest worker's predicted next push, so it
//                  waits as little as it can (ClockTable says when r is
//                  chosen and how the intervals are measured).
// The server publishes, per worker, the highest clock it may start (its
// bound); a worker at clock c computes only while c <= bound.
#ifndef RDMAFLOW_STRATEGIES_PS_SYNC_POLICY_H_
#define RDMAFLOW_STRATEGIES_PS_SYNC_POLICY_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rdmaflow::strategies::ps {

enum class SyncMode { kBsp, kAsp, kSsp, kDssp };

// Value type.
struct SyncPolicy {
  SyncMode mode = SyncMode::kBsp;
  int staleness = 0;       // S of ssp; LOW of dssp; 0 for bsp
  int staleness_high = 0;  // HIGH of dssp

  // "bsp", "asp", "ssp:3", "dssp:1:6". kInvalidArgument explaining the
  // syntax for anything else (negative bounds, LOW > HIGH).
  static absl::StatusOr<SyncPolicy> Parse(absl::string_view text);
  std::string ToString() const;
};

constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();

// What DSSP knows of a worker's pushes: when the last came, and the interval
// before it (0 while unknown). Seconds on any common clock.
struct PushTiming {
  double last = 0;
  double interval = 0;
};

// DSSP's choice for a worker that just reached the lower bound: the r in
// [0, range] minimizing |fastest.last + r * fastest.interval - next|, where
// `next` is the slowest worker's next predicted push after `now` (its last
// push plus whole intervals). Ties go to the smaller r; 0 while either
// interval is unknown.
int DsspExtraIterations(const PushTiming& fastest, const PushTiming& slowest,
                        double now, int range);

// Whether worker `me` may pull a slice of a shard into its step `clock`,
// from the slice's row of its server's clock words (`held`: each worker's
// gradients the slice holds, a copy of what the server published; -1
// before the server started) and `bound`, the lowest bound of all servers
// for `me`: once the slice holds `me`'s own gradients of every step before
// (read-my-writes), and under bsp every worker's (exactly the step's
// updates), otherwise once `clock` is within the bound. kDataLoss when the
// row says the slice holds more of `me`'s gradients than `me` pushed
// (`clock`): a forged or foreign row, never trusted.
absl::StatusOr<bool> SlicePermitted(const std::vector<int64_t>& held, int me, int64_t clock,
                                    SyncMode mode, int64_t bound);

// The server's view of its workers. Thread-compatible.
//
// DSSP, as this table runs it: a worker whose push takes it one past the
// lower bound (clock == min + LOW + 1) gets a grant of r extra iterations
// (DsspExtraIterations over [0, HIGH - LOW]); it runs them without waiting,
// then waits until the lower bound covers its clock again, and the next
// time it reaches the edge a new r is chosen. A worker's interval is the
// time from when it could last start (its previous push, or the moment the
// bound released it if it was waiting) to its push: an iteration's own
// time, never the wait, so a fast worker held back by a straggler keeps
// its own pace in the prediction. A table sees only its own server's bound:
// with several servers, a wait on another server's bound still counts in
// the interval here (each server also chooses its own grants; a worker
// goes on within the lowest bound of all).
class ClockTable {
 public:
  ClockTable(const SyncPolicy& policy, int workers);

  // Worker `w` pushed a gradient at `now` (seconds); updates its timing,
  // its bound (DSSP decides r here) and notes when waiting workers are
  // released.
  void OnPush(int w, double now);

  int workers() const { return static_cast<int>(clocks_.size()); }
  int64_t clock(int w) const { return clocks_[w]; }
  int64_t min_clock() const;
  const std::vector<int64_t>& clocks() const { return clocks_; }
  // The highest clock worker `w` may start now (kUnbounded under asp).
  int64_t Bound(int w) const;
  // The iterations DSSP lets `w` run beyond min + LOW now (0 otherwise).
  int extra(int w) const;
  // What the table knows of `w`'s pushes (interval without waits).
  const PushTiming& timing(int w) const { return timing_[w]; }

 private:
  SyncPolicy policy_;
  std::vector<int64_t> clocks_;
  std::vector<PushTiming> timing_;
  // DSSP: the highest clock each worker was granted (-1: none).
  std::vector<int64_t> grant_;
  // Whether each worker's clock is past its bound (it waits), and when
  // the bound last released it (-inf: never held).
  std::vector<bool> held_;
  std::vector<double> released_;
};

}  // namespace rdmaflow::strategies::ps

#endif  // RDMAFLOW_STRATEGIES_PS_SYNC_POLICY_H_
