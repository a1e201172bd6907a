// File: layer_separated_model.cc
// -----------------------------------------------------------------------------
// Stanza as strategies/layer_separated runs it: ranks 0..C-1 train the
// features, C..N-1 the head; conv rank i is served by FC rank C + i mod K.
// A conv rank's step, strictly in sequence: features forward; send the
// activations and labels; wait for their gradients; features backward;
// all-reduce the features' gradients among the conv ranks; SGD. An FC rank
// waits for all the conv ranks it serves, runs the head forward and backward
// on their batches together, sends each its activation gradients, then
// all-reduces the head's gradients among the FC ranks and applies SGD.
// K comes from fc_ranks=K or, as the strategy does, from its cost model
// (cost_model.h) fed with the calibrated times. The strategy never calls the
// trainer's compute, so rdmaflow_train's --slow_rank does not slow it; the
// model slows the straggler's features all the same (a real straggler
// would be slow).
#include <algorithm>
#include <numeric>
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
  LayerSeparatedModel(Job& job, int fc_ranks)
      : job_(job), fc_ranks_(fc_ranks), conv_ranks_(job.ranks() - fc_ranks) {
    for (int r = 0; r < job.ranks(); ++r) {
      (r < conv_ranks_ ? conv_members_ : fc_members_).push_back(r);
    }
    served_.resize(fc_ranks_);
    for (int i = 0; i < conv_ranks_; ++i) served_[i % fc_ranks_].push_back(i);
    conv_step_.assign(conv_ranks_, 0);
    fc_state_.resize(fc_ranks_);
  }

  void Start() {
    for (int i = 0; i < conv_ranks_; ++i) ConvStep(i);
  }

 private:
  struct FcState {
    int step = 0;     // the step it serves next
    int arrived = 0;  // activations of that step in
    bool busy = false;
  };

  int FcRankOf(int conv) const { return conv_ranks_ + conv % fc_ranks_; }
  double ActivationBytes() const {
    return job_.costs().activation_bytes + 8.0 * job_.costs().batch;  // + labels
  }

  void ConvStep(int i) {
    if (conv_step_[i] >= job_.steps()) {
      job_.Leave(i);
      return;
    }
    if (i == 0) job_.log().Start(job_.now());
    job_.Compute(i, job_.costs().features_forward, [this, i] {
      const double sent = job_.now();
      job_.Write(i, FcRankOf(i), ActivationBytes(), [this, i, sent] {
        FcArrive(FcRankOf(i) - conv_ranks_, i, sent);
      });
    });
  }

  // The activations of conv rank `i` reached FC rank `f`.
  void FcArrive(int f, int i, double sent) {
    if (i == 0) send_time_ = sent;
    FcState& fc = fc_state_[f];
    ++fc.arrived;
    FcServe(f);
  }

  void FcServe(int f) {
    FcState& fc = fc_state_[f];
    const int m = static_cast<int>(served_[f].size());
    if (fc.busy || fc.arrived < m) return;
    fc.busy = true;
    fc.arrived -= m;
    const int rank = conv_ranks_ + f;
    const Costs& c = job_.costs();
    job_.Work(rank, m * (c.head_forward + c.head_backward + c.loss), [this, f, rank] {
      for (int i : served_[f]) {
        job_.Write(rank, i, job_.costs().activation_bytes + 8,
                             [this, i] { ConvBackward(i); });
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

  void ConvBackward(int i) {
    if (i == 0) {
      // From sending the activations to their gradients' arrival.
      job_.log().wait += job_.now() - send_time_;
      job_.log().comm += job_.now() - send_time_;
    }
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
          ++conv_step_[i];
          ConvStep(i);
        });
      });
    });
  }

  Job& job_;
  const int fc_ranks_;
  const int conv_ranks_;
  std::vector<int> conv_members_, fc_members_;
  std::vector<std::vector<int>> served_;
  std::vector<int> conv_step_;
  std::vector<FcState> fc_state_;
  double send_time_ = 0;  // rank 0's, this step
};

}  // namespace

absl::StatusOr<double> RunLayerSeparated(Job& job) {
  KeyValueParams params("layer_separated", job.scenario().params);
  int fc_ranks = 0;
  RETURN_IF_ERROR(params.Int("fc_ranks", 0, &fc_ranks));
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
  // to one process to 1e-5).
  job.set_update_rule("sgd");
  LayerSeparatedModel model(job, fc_ranks);
  model.Start();
  job.loop().Run();
  return static_cast<double>(n - fc_ranks) * c.batch;
}

}  // namespace rdmaflow::sim::internal
