// File: testing/toy_problem.h
// -----------------------------------------------------------------------------
// A deterministic two-layer perceptron on synthetic data, and its reference
// training (one process, torch.optim.SGD with momentum, on batches
// concatenated across workers): what the strategy tests compare a
// distributed run against.
#ifndef RDMAFLOW_STRATEGIES_TESTING_TOY_PROBLEM_H_
#define RDMAFLOW_STRATEGIES_TESTING_TOY_PROBLEM_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ATen/core/Tensor.h"
#include "absl/status/statusor.h"
#include "strategies/strategy.h"

namespace rdmaflow::strategies::testing {

struct ToyProblem {
  std::vector<at::Tensor> init;            // w1 [8,4], b1, w2 [3,8], b2
  std::vector<std::vector<at::Tensor>> x;  // [worker][step], [batch, 4]
  std::vector<std::vector<at::Tensor>> y;

  ToyProblem(int workers, int steps, int batch);

  // The hidden layer (w1, b1) and the output layer (w2, b2) on their own:
  // Features(p, x) feeds Head(p, h).
  static at::Tensor Features(const std::vector<at::Tensor>& p,
                                const at::Tensor& x);
  static at::Tensor Head(const std::vector<at::Tensor>& p,
                            const at::Tensor& h);
  static at::Tensor Loss(const std::vector<at::Tensor>& p,
                            const at::Tensor& x, const at::Tensor& y);
  // The model cut between its layers, over `p` (the parameters' tensors,
  // which must outlive it): features the hidden layer, head the output
  // layer (w2, b2), 4 inputs, 8 activations.
  static ModelSplit Split(const std::vector<at::Tensor>& p);

  // StrategyContext::next_batch for `worker`: its batches in step order,
  // `*step` the next one's (it counts them; must outlive the function).
  std::function<absl::StatusOr<Batch>()> NextBatch(int worker, int* step) const;

  // Fresh parameters named w1, b1, w2, b2, requiring grad.
  std::vector<Parameter> MakeParameters() const;

  // The harness's compute for `worker`: each call runs the forward and
  // backward pass of its next batch on `params` (which must outlive it).
  ComputeFn Compute(const std::vector<Parameter>& params, int worker) const;

  // `steps` of SGD (lr, momentum) from `init`, each on the batches of
  // `workers` concatenated; the final parameters.
  std::vector<at::Tensor> Reference(const std::vector<int>& workers, int steps,
                                       double lr, double momentum) const;

  // max |a - b| over the parameters.
  static double MaxDiff(const std::vector<at::Tensor>& a,
                        const std::vector<at::Tensor>& b);
};

// What the strategy tests train with: `steps`, lr 0.1 (the Reference()
// they compare with takes the same), momentum 0.9, a 60 s timeout.
StrategyOptions ToyOptions(int steps, std::map<std::string, std::string> params);

}  // namespace rdmaflow::strategies::testing

#endif  // RDMAFLOW_STRATEGIES_TESTING_TOY_PROBLEM_H_
