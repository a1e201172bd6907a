// File: testing/toy_problem.cc
#include "strategies/testing/toy_problem.h"

#include <algorithm>
#include <memory>

#include "ATen/Context.h"
#include "ATen/ops/addmm.h"
#include "ATen/ops/cat.h"
#include "ATen/ops/cross_entropy_loss.h"
#include "ATen/ops/randint.h"
#include "ATen/ops/randn.h"
#include "ATen/ops/relu.h"
#include "torch/optim/sgd.h"

namespace rdmaflow::strategies::testing {

ToyProblem::ToyProblem(int workers, int steps, int batch) {
  at::manual_seed(7);
  init = {at::randn({8, 4}) * 0.5, at::randn({8}) * 0.1,
          at::randn({3, 8}) * 0.5, at::randn({3}) * 0.1};
  x.resize(workers);
  y.resize(workers);
  for (int w = 0; w < workers; ++w) {
    for (int t = 0; t < steps + 1; ++t) {
      x[w].push_back(at::randn({batch, 4}));
      y[w].push_back(at::randint(0, 3, {batch}, at::kLong));
    }
  }
}

at::Tensor ToyProblem::Features(const std::vector<at::Tensor>& p,
                                   const at::Tensor& x) {
  return at::relu(at::addmm(p[1], x, p[0].t()));
}

at::Tensor ToyProblem::Head(const std::vector<at::Tensor>& p,
                               const at::Tensor& h) {
  return at::addmm(p[3], h, p[2].t());
}

std::function<absl::StatusOr<Batch>()> ToyProblem::NextBatch(int worker, int* step) const {
  return [this, worker, step]() -> absl::StatusOr<Batch> {
    Batch batch{x[worker][*step], y[worker][*step]};
    ++*step;
    return batch;
  };
}

ModelSplit ToyProblem::Split(const std::vector<at::Tensor>& p) {
  ModelSplit split;
  split.features = [&p](const at::Tensor& x) { return Features(p, x); };
  split.head = [&p](const at::Tensor& h) { return Head(p, h); };
  split.head_parameters = {"w2", "b2"};
  split.sample_shape = {4};
  split.activation_shape = {8};
  return split;
}

at::Tensor ToyProblem::Loss(const std::vector<at::Tensor>& p,
                               const at::Tensor& x, const at::Tensor& y) {
  return at::cross_entropy_loss(Head(p, Features(p, x)), y);
}

std::vector<Parameter> ToyProblem::MakeParameters() const {
  std::vector<Parameter> out;
  const char* names[] = {"w1", "b1", "w2", "b2"};
  for (size_t i = 0; i < init.size(); ++i) {
    out.push_back({names[i], init[i].clone().requires_grad_(true)});
  }
  return out;
}

ComputeFn ToyProblem::Compute(const std::vector<Parameter>& params, int worker) const {
  auto step = std::make_shared<int>(0);
  return [this, &params, worker, step]() -> absl::StatusOr<ComputeResult> {
    std::vector<at::Tensor> p;
    for (const Parameter& param : params) p.push_back(param.tensor);
    const at::Tensor& batch = x[worker][*step];
    at::Tensor loss = Loss(p, batch, y[worker][*step]);
    loss.backward();
    ++*step;
    return ComputeResult{loss.item<double>(), 0, batch.size(0)};
  };
}

std::vector<at::Tensor> ToyProblem::Reference(const std::vector<int>& workers,
                                                 int steps, double lr,
                                                 double momentum) const {
  std::vector<at::Tensor> params;
  for (const at::Tensor& t : init) params.push_back(t.clone().requires_grad_(true));
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(lr).momentum(momentum));
  for (int t = 0; t < steps; ++t) {
    std::vector<at::Tensor> xs, ys;
    for (int w : workers) {
      xs.push_back(x[w][t]);
      ys.push_back(y[w][t]);
    }
    sgd.zero_grad();
    Loss(params, at::cat(xs), at::cat(ys)).backward();
    sgd.step();
  }
  for (at::Tensor& p : params) p = p.detach();
  return params;
}

double ToyProblem::MaxDiff(const std::vector<at::Tensor>& a,
                           const std::vector<at::Tensor>& b) {
  double diff = a.size() == b.size() ? 0 : 1e30;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, (a[i].detach() - b[i].detach()).abs().max().item<double>());
  }
  return diff;
}

StrategyOptions ToyOptions(int steps, std::map<std::string, std::string> params) {
  StrategyOptions options;
  options.steps = steps;
  options.learning_rate = 0.1;
  options.momentum = 0.9;
  options.communicator_options.timeout = absl::Seconds(60);
  options.params = std::move(params);
  return options;
}

}  // namespace rdmaflow::strategies::testing
