// File: testing/toy_problem.h
// -----------------------------------------------------------------------------
// A deterministic two-layer perceptron on synthetic data, and its reference
// training (one process, torch.optim.SGD with momentum, on batches
// concatenated across workers): what the strategy tests compare a
// distributed run against.
#ifndef RDMAFLOW_STRATEGIES_TESTING_TOY_PROBLEM_H_
#define RDMAFLOW_STRATEGIES_TESTING_TOY_PROBLEM_H_

#include <map>
#include <string>
#include <vector>

#include "strategies/strategy.h"
#include "torch/types.h"  // torch::Tensor (torch/torch.h costs twice the compile time)

namespace rdmaflow::strategies::testing {

struct ToyProblem {
  std::vector<torch::Tensor> init;            // w1 [8,4], b1, w2 [3,8], b2
  std::vector<std::vector<torch::Tensor>> x;  // [worker][step], [batch, 4]
  std::vector<std::vector<torch::Tensor>> y;

  ToyProblem(int workers, int steps, int batch);

  // The hidden layer (w1, b1) and the output layer (w2, b2) on their own:
  // Features(p, x) feeds Head(p, h).
  static torch::Tensor Features(const std::vector<torch::Tensor>& p,
                                const torch::Tensor& x);
  static torch::Tensor Head(const std::vector<torch::Tensor>& p,
                            const torch::Tensor& h);
  static torch::Tensor Loss(const std::vector<torch::Tensor>& p,
                            const torch::Tensor& x, const torch::Tensor& y);

  // Fresh parameters named w1, b1, w2, b2, requiring grad.
  std::vector<Parameter> MakeParameters() const;

  // The harness's compute for `worker`: each call runs the forward and
  // backward pass of its next batch on `params` (which must outlive it).
  ComputeFn Compute(const std::vector<Parameter>& params, int worker) const;

  // `steps` of SGD (lr, momentum) from `init`, each on the batches of
  // `workers` concatenated; the final parameters.
  std::vector<torch::Tensor> Reference(const std::vector<int>& workers, int steps,
                                       double lr, double momentum) const;

  // max |a - b| over the parameters.
  static double MaxDiff(const std::vector<torch::Tensor>& a,
                        const std::vector<torch::Tensor>& b);
};

// What the strategy tests train with: `steps`, lr 0.1 (the Reference()
// they compare with takes the same), momentum 0.9, a 60 s timeout.
StrategyOptions ToyOptions(int steps, std::map<std::string, std::string> params);

}  // namespace rdmaflow::strategies::testing

#endif  // RDMAFLOW_STRATEGIES_TESTING_TOY_PROBLEM_H_
