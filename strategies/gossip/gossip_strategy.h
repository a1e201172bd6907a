// File: gossip_strategy.h
// -----------------------------------------------------------------------------
// Gossiping SGD ("gossip", Jin et al. 2016): every rank trains its own
// replica with local SGD and, every `period` steps, mixes with one peer:
//   pull (default): publishes its parameters in a versioned buffer
//     (onesided/versioned_buffer.h), reads the peer's latest parameters with
//     one-sided READs (never a torn tensor: the seqlock retries) and mixes
//     theta_i <- (1 - beta) theta_i + beta theta_j;
//   push: writes its parameters into its slot of the peer's mailbox
//     (onesided/mailbox.h) with one-sided WRITEs, and mixes every whole
//     message found in its own mailbox the same way.
// The peer (peer_selector.h) is drawn uniformly at random (seeded) or is the
// next rank on a ring. The peer's CPU is not involved on transports with
// true one-sided operations. A peer whose read or write fails as gone
// (kUnavailable, or kDeadlineExceeded: slower than the timeout) is skipped
// from then on (peers_lost(), peer_errors()); Finish() waits for the peers
// still alive only. A read that timed out was cancelled before the error
// came back (rdma/blocking.h); should its cancellation not have gone
// through, it can only land in a scratch buffer that is never mixed again.
// With overlap=on (pull only; issue 48) the read runs on a communication
// thread (communication_thread.h) during the next step's compute, and is
// mixed after that step's local update: the asynchronous form. Each mix
// lands one local step later than without overlap (the peer's parameters
// are as the read found them during that step, never torn), and what a
// rank publishes includes its last mix.
// Device parameters (StrategyContext::device; pull only: a push's mailbox
// is host memory, so push stages): the replica, the published copies
// (VersionedBuffer with copies_in = kDevice) and the scratch a peer's
// parameters are read into are device memory; a read moves them device to
// device (IPC on one host), and the mix runs as torch's kernels there.
// Parameters: beta (0.5), period (1), topology (random|ring), mode
// (pull|push), copies (versions kept per pull buffer, 3), seed (1),
// overlap (off|on; off).
// See docs/strategies.md.
#ifndef RDMAFLOW_STRATEGIES_GOSSIP_GOSSIP_STRATEGY_H_
#define RDMAFLOW_STRATEGIES_GOSSIP_GOSSIP_STRATEGY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "onesided/mailbox.h"
#include "onesided/versioned_buffer.h"
#include "rdma/memory_region.h"
#include "strategies/gossip/peer_selector.h"
#include "strategies/communication_thread.h"
#include "strategies/local_sgd_strategy.h"

namespace rdmaflow::strategies::gossip {

enum class GossipMode { kPull, kPush };

struct GossipOptions {
  double beta = 0.5;
  int period = 1;
  Topology topology = Topology::kRandom;
  GossipMode mode = GossipMode::kPull;
  int copies = 3;
  uint64_t seed = 1;
  bool overlap = false;
};

// Thread-compatible: one thread drives a rank's strategy.
class GossipStrategy final : public LocalSgdStrategy {
 public:
  // kInvalidArgument for bad parameters (beta outside (0, 1], ...).
  static absl::StatusOr<std::unique_ptr<GossipStrategy>> Create(
      const StrategyOptions& options);

  std::string name() const override { return "gossip"; }
  // Pull: its replica, published copies and reads on the device.
  bool takes_device_parameters() const override { return gossip_.mode == GossipMode::kPull; }
  bool exchanges_on_device() const override { return on_device_; }

  // The peers this rank mixed with, in order (for tests). In push mode,
  // the senders of the messages it mixed.
  const std::vector<int>& peers_mixed() const { return peers_mixed_; }
  // The peers found gone, in the order they were found, and the error each
  // was found gone with (naming the peer and the operation).
  const std::vector<int>& peers_lost() const { return peers_lost_; }
  const std::vector<absl::Status>& peer_errors() const { return peer_errors_; }
  // overlap=on: reads of a peer's parameters that have returned (failed
  // ones too), counted on the thread that ran them: tests watch them
  // return during compute. Any thread.
  int64_t reads_finished() const { return reads_finished_.load(std::memory_order_acquire); }

 private:
  GossipStrategy(StrategyOptions options, GossipOptions gossip)
      : LocalSgdStrategy(std::move(options), gossip.period), gossip_(gossip) {}
  absl::StatusOr<graph::GraphDef> DoPrepare(std::vector<Parameter> parameters) override;
  absl::Status DoStart() override;
  // Waits until every live peer has finished too (they may be reading our
  // memory), at most twice the timeout (a probe posted just before the
  // deadline runs out its own); the same after a failed step (the peers
  // may still be reading our memory, and a read of memory already freed
  // fails them as not permitted, not as a lost peer).
  absl::Status DoFinish(bool after_failure) override;
  // DoFinish()'s wait for the live peers to finish.
  absl::Status FinishWithPeers();
  std::string Ns() const;
  // Writes the replica into the next version of the published buffer, and
  // waits for torch's device (if any) so that it is whole when published.
  absl::Status Publish();
  // A buffer for a peer's parameters: device memory with device parameters.
  absl::StatusOr<rdma::MemoryRegion> AllocateScratch();
  absl::Status Exchange() override;
  // Pull: publishes, then mixes with the next peer's latest parameters.
  absl::Status Pull();
  // overlap=on: publishes, then starts the read of the next peer's latest
  // parameters on the communication thread.
  absl::Status StartPull();
  // overlap=on: ends the read StartPull() left running and mixes it in.
  absl::Status FinishExchange(StepReport& report) override;
  // The end of a read of `peer` into `scratch_`: mixes it in, or marks the
  // peer gone.
  absl::Status TakeRead(int peer, const absl::StatusOr<uint64_t>& version);
  // Push: mixes what arrived, then sends to the next peer.
  absl::Status Push();
  // Pull: after a failed read into `scratch_`, which may still land there
  // if its cancellation did not go through, reads go to a fresh buffer.
  absl::Status RetireScratch();
  // theta_i <- (1 - beta) theta_i + beta theta at `theta` (float32, on the
  // replica's device).
  void Mix(int peer, const std::byte* theta);
  // For a failed operation on `peer`: true (and the peer is skipped from
  // now on) when the status says the peer is gone.
  bool LostPeer(int peer, const absl::Status& status);
  // A liveness probe of a peer in FinishWithPeers(): answered by the
  // loop's progress, into state that outlives the strategy.
  struct ProbeState {
    absl::Time posted;
    bool answered = false;
    absl::Status status;
  };
  // `peer`'s probe: its error once answered with one (named), or
  // kDeadlineExceeded once still out `timeout` after it was posted; OK
  // while it is out, once answered OK (`probe` is then cleared), and when
  // none is out (posting one first if `post`; a push-back waits for the
  // next round).
  absl::Status TakeProbe(int peer, std::shared_ptr<ProbeState>& probe, bool post,
                         absl::Duration timeout);

  const GossipOptions gossip_;
  size_t bytes_ = 0;
  bool on_device_ = false;  // pull with device parameters
  std::unique_ptr<PeerSelector> selector_;
  // Pull.
  std::unique_ptr<onesided::VersionedBuffer> published_;
  std::vector<std::unique_ptr<onesided::VersionedReader>> readers_;  // by rank
  std::unique_ptr<rdma::MemoryRegion> scratch_;  // a peer's parameters
  // Scratch buffers of reads that failed: never read again, kept allocated
  // for the strategy's life (at most one per lost peer).
  std::vector<std::unique_ptr<rdma::MemoryRegion>> retired_scratch_;
  // Push.
  std::unique_ptr<onesided::Mailbox> mailbox_;
  std::vector<bool> gone_;  // by rank
  std::vector<int> peers_mixed_;
  std::vector<int> peers_lost_;
  std::vector<absl::Status> peer_errors_;
  // overlap=on: the read in flight (its peer, -1 when none, and how it
  // ended), on a thread declared last so that it is joined before the
  // memory it reads into goes.
  int reading_ = -1;
  absl::StatusOr<uint64_t> read_;
  std::atomic<int64_t> reads_finished_{0};
  std::unique_ptr<CommunicationThread> background_;
};

}  // namespace rdmaflow::strategies::gossip

#endif  // RDMAFLOW_STRATEGIES_GOSSIP_GOSSIP_STRATEGY_H_
