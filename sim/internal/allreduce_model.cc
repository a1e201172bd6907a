// File: allreduce_model.cc
// -----------------------------------------------------------------------------
// Data parallelism as strategies/allreduce runs it: every rank computes
// (forward, loss, backward), then all-reduces its gradients bucket after
// bucket once backward is done (nothing overlaps), scales and applies SGD.
// The all-reduce is a blocking collective: it starts when the last rank
// arrives (collective_time.h says how long it takes).
#include <numeric>
#include <vector>

#include "common/key_value_params.h"
#include "common/status_macros.h"
#include "sim/internal/job.h"

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

class AllReduceModel {
 public:
  explicit AllReduceModel(Job& job) : job_(job), members_(job.ranks()) {
    std::iota(members_.begin(), members_.end(), 0);
    step_.assign(job.ranks(), 0);
  }

  void Start() {
    for (int r = 0; r < job_.ranks(); ++r) Step(r);
  }

 private:
  void Step(int r) {
    if (step_[r] >= job_.steps()) {
      job_.Leave(r);
      return;
    }
    if (r == 0) job_.log().Start(job_.now());
    job_.Compute(r, job_.costs().step(), [this, r] {
      const double arrived = job_.now();
      job_.AllReduce(members_, job_.costs().param_bytes(), r, [this, r, arrived] {
        if (r == 0) job_.log().comm += job_.now() - arrived;
        job_.Work(r, job_.costs().optimizer, [this, r] {
          ++step_[r];
          if (r == 0) job_.log().End(job_.now());
          Step(r);
        });
      });
    });
  }

  Job& job_;
  std::vector<int> members_;
  std::vector<int> step_;
};

}  // namespace

absl::StatusOr<double> RunAllReduce(Job& job) {
  KeyValueParams params("allreduce", job.scenario().params);
  AllReduceShape shape;
  RETURN_IF_ERROR(ReadAllReduceShape(params, &shape));
  RETURN_IF_ERROR(params.Done());
  job.set_shape(shape);
  job.set_update_rule("sgd");
  AllReduceModel model(job);
  model.Start();
  job.loop().Run();
  return static_cast<double>(job.ranks()) * job.costs().batch;
}

}  // namespace rdmaflow::sim::internal
