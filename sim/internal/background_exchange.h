// File: background_exchange.h
// -----------------------------------------------------------------------------
// The exchange a decentralized strategy with overlap=on leaves running
// beside its next step's compute (gossip's read, Moshpit's round), one a
// rank: the rank's transport is served meanwhile (Job::Serve), and after
// the next update the rank waits for it if it has not ended. As the
// strategies' CommunicationThread, the serving goes on after the exchange
// ended, until that wait (or the rank leaves): the peers' reads of this
// rank are answered through the whole step. The models say what the
// exchange is and what landing it costs.
#ifndef RDMAFLOW_SIM_INTERNAL_BACKGROUND_EXCHANGE_H_
#define RDMAFLOW_SIM_INTERNAL_BACKGROUND_EXCHANGE_H_

#include <functional>
#include <vector>

#include "sim/internal/job.h"

namespace rdmaflow::sim::internal {

// Single-threaded, like the Job.
class BackgroundExchanges {
 public:
  // An exchange: calls its argument once, when it ends, with whether it
  // brought something to land (a read that found a peer, a round).
  using Exchange = std::function<void(std::function<void(bool landed)> done)>;

  explicit BackgroundExchanges(Job& job);

  // A step's end with overlap=on, after `rank`'s update: waits for the
  // exchange in flight, works `land` seconds when it landed something, and
  // when `due` works `copy` seconds (what the exchange starts from) and
  // starts `exchange`; then `next()` (the next step, beside the exchange).
  void AfterUpdate(int rank, double land, bool due, double copy, Exchange exchange,
                   std::function<void()> next);

  // `rank` leaves once its exchange has ended (its last lands first).
  void Leave(int rank);

 private:
  // Runs `then(landed)` once `rank`'s exchange has ended (at once when none
  // runs): `landed` says whether one ended with something to land since
  // the last call. The reporter's wait goes to the log.
  void AfterEnd(int rank, std::function<void(bool landed)> then);
  // Starts `exchange` for `rank`, serving its transport until it ends;
  // the communication time goes to the log (the reporter's).
  void Start(int rank, Exchange exchange);

  Job& job_;
  std::vector<bool> running_;
  std::vector<bool> landed_;
  // By rank: its communication thread serves (from Start to the next
  // AfterEnd or Leave), whether or not its exchange still runs.
  std::vector<bool> serving_;
  std::vector<std::function<void()>> on_end_;
};

}  // namespace rdmaflow::sim::internal

#endif  // RDMAFLOW_SIM_INTERNAL_BACKGROUND_EXCHANGE_H_
