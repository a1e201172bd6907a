// File: allreduce_model.cc
// -----------------------------------------------------------------------------
// Data parallelism as strategies/allreduce runs it: every rank computes
// (forward, loss, backward), all-reduces its gradients, scales and applies
// SGD. The all-reduce is a blocking collective: it starts when the last
// rank arrives (collective_time.h says how long it takes).
// overlap=on (the strategy's default): the head's gradients (backward
// fills them first) are all-reduced by the communication thread while
// backward goes on through the features (the rank serving its transport
// meanwhile), then the features' once backward is done. overlap=off: the
// whole all-reduce after backward. overlap=forward: as on, but some of the
// head's layers (DeferredBytes(): the strategy's forward_buckets.h schedule,
// by layer instead of by bucket) are all-reduced during the next step's
// forward through the features, which the head's forward then waits for.
#include <algorithm>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "common/key_value_params.h"
#include "common/status_macros.h"
#include "sim/internal/job.h"
#include "strategies/allreduce/forward_buckets.h"

namespace rdmaflow::sim::internal {

absl::Status ReadAllReduceShape(KeyValueParams& params, AllReduceShape* shape) {
  int64_t bucket = static_cast<int64_t>(shape->bucket_bytes);
  int64_t chunk = static_cast<int64_t>(shape->chunk_bytes);
  int64_t slots = 32;
  RETURN_IF_ERROR(params.Size("bucket_bytes", 0, &bucket));
  RETURN_IF_ERROR(params.Size("chunk_bytes", 64, &chunk));
  RETURN_IF_ERROR(params.Int("slots", int64_t{1}, &slots));  // not modelled
  shape->bucket_bytes = static_cast<double>(bucket);
  shape->chunk_bytes = static_cast<double>(chunk);
  return absl::OkStatus();
}

namespace {

// overlap=forward's deferred bytes: the strategy's schedule
// (strategies/allreduce/forward_buckets.h) of the model's layers, each
// layer's parameters one tensor, in backward's order (the last layer's
// first), bucketed as the strategy's group buckets them.
absl::StatusOr<double> DeferredBytes(const Costs& c, const AllReduceShape& shape,
                                     int64_t budget) {
  std::vector<size_t> bytes;
  std::vector<bool> head;
  for (size_t i = c.layer_param_bytes.size(); i-- > 0;) {
    if (c.layer_param_bytes[i] <= 0) continue;
    bytes.push_back(static_cast<size_t>(c.layer_param_bytes[i]));
    head.push_back(c.layer_head[i]);
  }
  ASSIGN_OR_RETURN(const strategies::ForwardSchedule schedule,
                   strategies::ScheduleTensorsForForward(
                       bytes, head, static_cast<size_t>(shape.bucket_bytes), budget));
  return static_cast<double>(schedule.deferred_bytes);
}

class AllReduceModel {
 public:
  // `deferred`: overlap=forward's bytes all-reduced during the next
  // forward (0 otherwise).
  AllReduceModel(Job& job, bool overlap, double deferred)
      : job_(job), overlap_(overlap), deferred_(deferred), members_(job.ranks()) {
    std::iota(members_.begin(), members_.end(), 0);
    step_.assign(job.ranks(), 0);
  }

  void Start() {
    for (int r = 0; r < job_.ranks(); ++r) Step(r);
  }

 private:
  void Step(int r) {
    if (step_[r] >= job_.steps()) {
      if (overlap_ && deferred_ > 0 && job_.steps() > 0) {
        // The strategy's Finish() applies the last step's deferred buckets.
        job_.AllReduce(members_, deferred_, r, [this, r] { job_.Leave(r); });
        return;
      }
      job_.Leave(r);
      return;
    }
    if (r == 0) job_.log().Start(job_.now());
    const Costs& c = job_.costs();
    if (overlap_ && deferred_ > 0) {
      Forwarded(r);
      return;
    }
    if (overlap_ && c.head_param_bytes > 0 && c.features_param_bytes > 0) {
      Overlapped(r);
      return;
    }
    job_.Compute(r, c.step(), [this, r] {
      const double arrived = job_.now();
      job_.AllReduce(members_, job_.costs().param_bytes(), r, [this, r, arrived] {
        if (r == 0) job_.log().comm += job_.now() - arrived;
        Update(r);
      });
    });
  }

  void Overlapped(int r) {
    const Costs& c = job_.costs();
    const double until_head =
        c.features_forward + c.head_forward + c.loss + c.head_backward;
    job_.Compute(r, until_head, [this, r] {
      job_.Serve(r, true);
      HeadBesideFeaturesBackward(r, job_.costs().head_param_bytes);
    });
  }

  // From the end of the head's backward: `head_bytes` all-reduced beside
  // the features' backward, then the features' bytes, then SGD; the
  // communication thread's serving ends with them. Both branches end
  // here: the head's all-reduce and the features' backward. The log counts
  // the two all-reduces as communication, and what the step waits after
  // backward as waiting (the strategy's spans).
  void HeadBesideFeaturesBackward(int r, double head_bytes) {
    const double begin = job_.now();
    auto joined = std::make_shared<int>(0);
    auto head_end = std::make_shared<double>(begin);
    auto both = [this, r, begin, joined, head_end] {
      if (++*joined < 2) return;
      const double computed = job_.now();
      job_.AllReduce(members_, job_.costs().features_param_bytes, r,
                     [this, r, begin, computed, head_end] {
                       if (r == 0) {
                         job_.log().comm += *head_end - begin + job_.now() - computed;
                         job_.log().wait += job_.now() - computed;
                       }
                       job_.Serve(r, false);
                       Update(r);
                     });
    };
    job_.AllReduce(members_, head_bytes, r, [this, both, head_end] {
      *head_end = job_.now();
      both();
    });
    job_.Compute(r, job_.costs().features_backward, both);
  }

  // overlap=forward: the last step's deferred all-reduce beside the
  // features' forward, then the head's forward and backward, then
  // overlap=on's all-reduce of the rest of the head beside the features'
  // backward.
  void Forwarded(int r) {
    const double begin = job_.now();
    job_.Serve(r, true);
    auto joined = std::make_shared<int>(0);
    auto features_end = std::make_shared<double>(begin);
    auto pending_end = std::make_shared<double>(begin);
    auto both = [this, r, begin, joined, features_end, pending_end] {
      if (++*joined < 2) return;
      if (r == 0) {
        job_.log().comm += *pending_end - begin;
        job_.log().wait += std::max(0.0, *pending_end - *features_end);
      }
      const Costs& c = job_.costs();
      job_.Compute(r, c.head_forward + c.loss + c.head_backward, [this, r] {
        HeadBesideFeaturesBackward(r, job_.costs().head_param_bytes - deferred_);
      });
    };
    job_.Compute(r, job_.costs().features_forward, [this, both, features_end] {
      *features_end = job_.now();
      both();
    });
    if (step_[r] == 0) {  // nothing deferred yet
      *pending_end = begin;
      both();
      return;
    }
    job_.AllReduce(members_, deferred_, r, [this, both, pending_end] {
      *pending_end = job_.now();
      both();
    });
  }

  void Update(int r) {
    job_.Work(r, job_.costs().optimizer, [this, r] {
      ++step_[r];
      if (r == 0) job_.log().End(job_.now());
      Step(r);
    });
  }

  Job& job_;
  const bool overlap_;
  const double deferred_;
  std::vector<int> members_;
  std::vector<int> step_;
};

}  // namespace

absl::StatusOr<double> RunAllReduce(Job& job) {
  KeyValueParams params("allreduce", job.scenario().params);
  AllReduceShape shape;
  RETURN_IF_ERROR(ReadAllReduceShape(params, &shape));
  std::string overlap = "on";
  RETURN_IF_ERROR(params.Choice("overlap", {"on", "off", "forward"}, &overlap));
  // forward_bytes=auto (the default) is a third of the parameters' bytes.
  int64_t forward_bytes = strategies::kAutoBudget;
  RETURN_IF_ERROR(
      params.SizeOrAuto("forward_bytes", 0, strategies::kAutoBudget, &forward_bytes));
  RETURN_IF_ERROR(params.Done());
  job.set_shape(shape);
  job.set_update_rule("sgd");
  double deferred = 0;
  if (overlap == "forward") {
    ASSIGN_OR_RETURN(deferred, DeferredBytes(job.costs(), shape, forward_bytes));
  }
  AllReduceModel model(job, overlap != "off", deferred);
  model.Start();
  job.loop().Run();
  return static_cast<double>(job.ranks()) * job.costs().batch;
}

}  // namespace rdmaflow::sim::internal
