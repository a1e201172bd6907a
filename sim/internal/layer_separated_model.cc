// File: layer_separated_model.cc
// -----------------------------------------------------------------------------
// Stanza as strategies/layer_separated runs it: ranks 0..C-1 train the
// features, C..N-1 the head; conv rank i is served by FC rank C + i mod K.
// A conv rank's step, in sequence without overlap: features forward; send the
// activations and labels; wait for their gradients; features backward;
// all-reduce the features' gradients among the conv ranks; SGD. An FC rank
// waits for all the conv ranks it serves, runs the head forward and backward
// on their batches together, sends each its activation gradients, then
// all-reduces the head's gradients among the FC ranks and applies SGD.
// overlap=on (Stanza's pipeline, the strategy's overlap=on): once a conv
// rank has sent batch t's activations it forwards and sends batch t+1 before
// batch t's gradients, which then wait for that forward to end.
// K comes from fc_ranks=K or, as the strategy does, from its cost model
// (cost_model.h) fed with the calibrated times. The strategy never calls the
// trainer's compute, so rdmaflow_train's --slow_rank does not slow it; the
// model slows the straggler's features all the same (a real straggler
// would be slow).
#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/key_value_params.h"
#include "common/status_macros.h"
#include "sim/internal/job.h"
#include "strategies/layer_separated/cost_model.h"

namespace rdmaflow::sim::internal {
namespace {

namespace stanza = strategies::layer_separated;

class LayerSeparatedModel {
 public:
  LayerSeparatedModel(Job& job, int fc_ranks, bool overlap)
      : job_(job), fc_ranks_(fc_ranks), conv_ranks_(job.ranks() - fc_ranks),
        overlap_(overlap) {
    for (int r = 0; r < job.ranks(); ++r) {
      (r < conv_ranks_ ? conv_members_ : fc_members_).push_back(r);
    }
    served_.resize(fc_ranks_);
    for (int i = 0; i < conv_ranks_; ++i) served_[i % fc_ranks_].push_back(i);
    conv_.resize(conv_ranks_);
    fc_state_.resize(fc_ranks_);
    for (int f = 0; f < fc_ranks_; ++f) fc_state_[f].pending.assign(served_[f].size(), 0);
  }

  void Start() {
    for (int i = 0; i < conv_ranks_; ++i) ConvNext(i);
  }

 private:
  struct ConvState {
    int step = 0;       // the batch whose gradients it applies next
    int forwarded = 0;  // batches forwarded and sent
    int grads = 0;      // batches whose gradients arrived
    bool busy = false;
  };
  struct FcState {
    int step = 0;  // the step it serves next
    // Per conv rank it serves (in served_ order): batches in, not yet
    // served. With overlap a conv rank may be a batch ahead of another.
    std::vector<int> pending;
    bool busy = false;
  };

  int FcRankOf(int conv) const { return conv_ranks_ + conv % fc_ranks_; }
  double ActivationBytes() const {
    return job_.costs().activation_bytes + 8.0 * job_.costs().batch;  // + labels
  }

  // What conv rank `i` does next, when it is free: forward its step's
  // batch, forward the next one (overlap), or back-propagate once the
  // gradients are in.
  void ConvNext(int i) {
    ConvState& c = conv_[i];
    if (c.busy) return;
    if (c.step >= job_.steps()) {
      job_.Leave(i);
      return;
    }
    if (c.forwarded <= c.step ||
        (overlap_ && c.forwarded == c.step + 1 && c.forwarded < job_.steps())) {
      ConvForward(i);
    } else if (c.grads > c.step) {
      ConvBackward(i);
    }
  }

  void ConvForward(int i) {
    ConvState& c = conv_[i];
    if (i == 0 && c.step == 0 && c.forwarded == 0) {
      job_.log().Start(job_.now());
      StepBegins();
    }
    c.busy = true;
    job_.Compute(i, job_.costs().features_forward, [this, i] {
      ConvState& c = conv_[i];
      ++c.forwarded;
      if (i == 0) forwards_done_ = job_.now();
      job_.Write(i, FcRankOf(i), ActivationBytes(), [this, i] { FcArrive(i); });
      c.busy = false;
      ConvNext(i);
    });
  }

  // Rank 0's step begins (its timeline, as the strategy records it).
  void StepBegins() {
    step_begin_ = forwards_done_ = job_.now();
    sent_before_ = conv_[0].forwarded > conv_[0].step;
  }

  // The activations of conv rank `i` reached its FC rank.
  void FcArrive(int i) {
    const int f = FcRankOf(i) - conv_ranks_;
    ++fc_state_[f].pending[i / fc_ranks_];
    FcServe(f);
  }

  void FcServe(int f) {
    FcState& fc = fc_state_[f];
    const int m = static_cast<int>(served_[f].size());
    if (fc.busy) return;
    for (int n : fc.pending) {
      if (n == 0) return;
    }
    fc.busy = true;
    for (int& n : fc.pending) --n;
    const int rank = conv_ranks_ + f;
    const Costs& c = job_.costs();
    job_.Work(rank, m * (c.head_forward + c.head_backward + c.loss), [this, f, rank] {
      for (int i : served_[f]) {
        job_.Write(rank, i, job_.costs().activation_bytes + 8, [this, i] { ConvGradients(i); });
      }
      job_.AllReduce(fc_members_, job_.costs().head_param_bytes, rank, [this, f, rank] {
        job_.Work(rank, job_.costs().optimizer * HeadFraction(), [this, f] {
          FcState& fc = fc_state_[f];
          fc.busy = false;
          ++fc.step;
          FcServe(f);
        });
      });
    });
  }

  double HeadFraction() const {
    return job_.costs().head_param_bytes / std::max(1.0, job_.costs().param_bytes());
  }

  void ConvGradients(int i) {
    ++conv_[i].grads;
    ConvNext(i);
  }

  void ConvBackward(int i) {
    if (i == 0) {
      // As the strategy records it: communication from sending this step's
      // activations (from the step's start when they went out in the step
      // before) to the gradients' arrival, the wait from the end of the
      // step's forwards.
      job_.log().comm += job_.now() - (sent_before_ ? step_begin_ : forwards_done_);
      job_.log().wait += job_.now() - forwards_done_;
    }
    conv_[i].busy = true;
    job_.Compute(i, job_.costs().features_backward, [this, i] {
      const double arrived = job_.now();
      job_.AllReduce(conv_members_, job_.costs().features_param_bytes, i,
                     [this, i, arrived] {
        const double optimizer = job_.costs().optimizer * (1 - HeadFraction());
        job_.Work(i, optimizer, [this, i, arrived] {
          if (i == 0) {
            job_.log().comm += job_.now() - arrived;  // all-reduce and SGD
            job_.log().End(job_.now());
          }
          ConvState& c = conv_[i];
          c.busy = false;
          ++c.step;
          if (i == 0) StepBegins();
          ConvNext(i);
        });
      });
    });
  }

  Job& job_;
  const int fc_ranks_;
  const int conv_ranks_;
  const bool overlap_;
  std::vector<int> conv_members_, fc_members_;
  std::vector<std::vector<int>> served_;
  std::vector<ConvState> conv_;
  std::vector<FcState> fc_state_;
  // Rank 0's current step: when it began, when its forwards ended, and
  // whether its batch went out in the step before.
  double step_begin_ = 0;
  double forwards_done_ = 0;
  bool sent_before_ = false;
};

}  // namespace

absl::StatusOr<double> RunLayerSeparated(Job& job) {
  KeyValueParams params("layer_separated", job.scenario().params);
  int fc_ranks = 0;
  RETURN_IF_ERROR(params.Int("fc_ranks", 0, &fc_ranks));
  std::string overlap = "off";
  RETURN_IF_ERROR(params.Choice("overlap", {"off", "on"}, &overlap));
  AllReduceShape shape;
  RETURN_IF_ERROR(ReadAllReduceShape(params, &shape));
  RETURN_IF_ERROR(params.Done());
  job.set_shape(shape);
  const int n = job.ranks();
  if (n < 2) {
    return absl::InvalidArgumentError("layer_separated needs at least 2 ranks");
  }
  if (fc_ranks >= n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer_separated fc_ranks=", fc_ranks, " leaves no conv rank of ", n));
  }
  const Costs& c = job.costs();
  if (c.head_param_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", job.scenario().model.model(),
        "' has no head layers in its profile: layer_separated needs them"));
  }
  if (fc_ranks == 0) {
    // The strategy's own choice, from the calibrated costs.
    stanza::StanzaCosts costs;
    costs.conv_s = c.features_forward + c.features_backward;
    costs.fc_s = c.head_forward + c.head_backward + c.loss;
    costs.activation_bytes = static_cast<int64_t>(c.activation_bytes);
    costs.conv_param_bytes = static_cast<int64_t>(c.features_param_bytes);
    costs.fc_param_bytes = static_cast<int64_t>(c.head_param_bytes);
    // The strategy times its ring at start: the link its ranks share.
    const LinkProfile& link = job.loop().topology().hosts() == 1
                                  ? job.scenario().local
                                  : job.scenario().network;
    costs.bandwidth_bytes_per_s = link.bandwidth_gbps() * 1e9;
    costs.latency_s = link.latency_us() * 1e-6;
    fc_ranks = stanza::ChooseFcRanks(costs, n);
  }
  if (fc_ranks > n - fc_ranks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer_separated fc_ranks=", fc_ranks, " leaves FC ranks that serve no conv rank (",
        n - fc_ranks, " conv ranks); the simulator models fc_ranks <= conv ranks"));
  }
  // SGD on the conv ranks' concatenated batches (the strategy's tests: equal
  // to one process to 1e-5); with the pipeline, the features one step
  // stale (an update rule of its own).
  job.set_update_rule(overlap == "on" ? "sgd:features_stale=1" : "sgd");
  LayerSeparatedModel model(job, fc_ranks, overlap == "on");
  model.Start();
  job.loop().Run();
  return static_cast<double>(n - fc_ranks) * c.batch;
}

}  // namespace rdmaflow::sim::internal
