// File: layer_profile.cc
#include "train/layer_profile.h"

#include <algorithm>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "strategies/exception_text.h"
#include "torch/torch.h"

namespace rdmaflow::train {
namespace {

constexpr int kWarmup = 2;

struct Part {
  std::string name;
  bool head = false;
  std::function<torch::Tensor(const torch::Tensor&)> forward;
  std::vector<torch::Tensor> parameters;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Runs `setup` then `fn` kWarmup + iterations times; the timed runs of `fn`
// alone, ms.
template <typename Setup, typename Fn>
std::vector<double> TimedRunsAfterMs(int iterations, Setup&& setup, Fn&& fn) {
  std::vector<double> ms;
  for (int i = 0; i < kWarmup + iterations; ++i) {
    setup();
    const absl::Time begin = absl::Now();
    fn();
    if (i >= kWarmup) ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - begin));
  }
  return ms;
}

// Runs `fn` kWarmup + iterations times; the timed runs, ms.
template <typename Fn>
std::vector<double> TimedRunsMs(int iterations, Fn&& fn) {
  return TimedRunsAfterMs(iterations, [] {}, std::forward<Fn>(fn));
}

// The median of the timed runs, ms.
template <typename Fn>
double TimeMs(int iterations, Fn&& fn) {
  return Median(TimedRunsMs(iterations, std::forward<Fn>(fn)));
}

// J of a uniform spread [median (1 - J), median (1 + J)] with the runs' 10th
// and 90th percentiles: they sit at +-0.8 J.
double UniformJitter(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  const double median = Median(ms);
  if (ms.size() < 2 || !(median > 0)) return 0;
  const size_t n = ms.size();
  const double p10 = ms[n / 10], p90 = ms[std::min(n - 1, n - 1 - n / 10)];
  return std::min(0.99, (p90 - p10) / (1.6 * median));
}

double Bytes(const std::vector<torch::Tensor>& tensors) {
  double bytes = 0;
  for (const torch::Tensor& t : tensors) bytes += static_cast<double>(t.numel()) * 4;
  return bytes;
}

// The parts of `model`: per module for a preset sequence, else features
// and head, else the whole model.
std::vector<Part> PartsOf(const Model& model) {
  std::vector<Part> parts;
  std::set<std::string> head_names(model.split.head_parameters.begin(),
                                   model.split.head_parameters.end());
  auto* sequence = model.module == nullptr
                       ? nullptr
                       : dynamic_cast<torch::nn::SequentialImpl*>(model.module.get());
  if (sequence != nullptr) {
    for (size_t i = 0; i < sequence->size(); ++i) {
      std::shared_ptr<torch::nn::Module> child = sequence->ptr(i);
      Part part;
      std::string kind = child->name();  // "torch::nn::Conv2dImpl"
      if (absl::StartsWith(kind, "torch::nn::")) kind = kind.substr(11);
      if (absl::EndsWith(kind, "Impl")) kind.resize(kind.size() - 4);
      part.name = absl::StrCat(i, ":", kind);
      for (const auto& p : child->named_parameters()) {
        part.parameters.push_back(p.value());
        if (head_names.count(absl::StrCat(i, ".", p.key()))) part.head = true;
      }
      // Modules without parameters (ReLU, pooling) follow what precedes.
      if (part.parameters.empty() && !parts.empty()) part.head = parts.back().head;
      torch::nn::AnyModule any = *(sequence->begin() + i);
      part.forward = [any](const torch::Tensor& x) mutable {
        return any.forward<torch::Tensor>(x);
      };
      parts.push_back(std::move(part));
    }
    return parts;
  }
  std::vector<torch::Tensor> head, features;
  for (const strategies::Parameter& p : model.Parameters()) {
    (head_names.count(p.name) ? head : features).push_back(p.tensor);
  }
  if (model.split_status.ok() && model.split.features && model.split.head) {
    parts.push_back({"features", false, model.split.features, features});
    parts.push_back({"head", true, model.split.head, head});
  } else {
    features.insert(features.end(), head.begin(), head.end());
    parts.push_back({"model", false, model.forward, features});
  }
  return parts;
}

torch::Tensor SampleBatch(const SampleSpec& sample, int batch) {
  std::vector<int64_t> shape = {batch};
  shape.insert(shape.end(), sample.shape.begin(), sample.shape.end());
  if (sample.int64) return torch::randint(0, sample.vocab, shape, torch::kInt64);
  return torch::randn(shape);
}

}  // namespace

absl::StatusOr<sim::ModelProfile> ProfileLayers(const Model& model,
                                                const SampleSpec& sample,
                                                const ProfileOptions& options) {
  if (options.batch_size < 1 || options.iterations < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "profiling needs a batch of at least 1 and at least 1 iteration, got batch ",
        options.batch_size, " and ", options.iterations, " iterations"));
  }
  sim::ModelProfile profile;
  profile.set_model(model.name);
  profile.set_batch_size(options.batch_size);
  const int n = options.iterations;
  std::string part_name = "the model";
  try {
    torch::manual_seed(1);
    const torch::Tensor input = SampleBatch(sample, options.batch_size);
    const torch::Tensor labels =
        torch::randint(0, sample.classes, {options.batch_size}, torch::kInt64);
    torch::Tensor x = input;
    bool first = true;
    for (Part& part : PartsOf(model)) {
      part_name = absl::StrCat("part ", part.name);
      sim::LayerProfile* layer = profile.add_layers();
      layer->set_name(part.name);
      layer->set_head(part.head);
      layer->set_param_bytes(Bytes(part.parameters));
      torch::Tensor in = x.detach();
      if (!first && in.is_floating_point()) in.requires_grad_(true);
      first = false;
      torch::Tensor y;
      layer->set_forward_ms(TimeMs(n, [&] { y = part.forward(in); }));
      layer->set_output_bytes(static_cast<double>(y.numel()) * y.element_size());
      const torch::Tensor grad = torch::ones_like(y);
      if (y.requires_grad()) {
        // Each run builds the graph untimed, then times the backward alone.
        // (Taking the forward's median off a timed forward+backward gave 0
        // whenever a noisy machine slowed the forward runs.)
        torch::Tensor out;
        layer->set_backward_ms(Median(TimedRunsAfterMs(
            n, [&] { out = part.forward(in); }, [&] { out.backward(grad); })));
      }
      for (torch::Tensor& p : part.parameters) p.mutable_grad() = torch::Tensor();
      x = y.detach();
    }
    part_name = "the loss";
    torch::Tensor logits = x.detach().requires_grad_(true);
    profile.set_loss_ms(TimeMs(n, [&] {
      torch::nn::functional::cross_entropy(logits, labels).backward();
    }));

    part_name = "the optimizer";
    int64_t count = 0;
    for (const strategies::Parameter& p : model.Parameters()) count += p.tensor.numel();
    torch::Tensor flat = torch::zeros({count}), g = torch::rand({count}),
                  v = torch::zeros({count});
    profile.set_optimizer_ms(TimeMs(n, [&] {
      torch::NoGradGuard no_grad;
      v.mul_(0.9).add_(g);
      flat.add_(v, -0.05);
    }));

    part_name = "a whole step";
    const std::vector<double> steps = TimedRunsMs(n, [&] {
      torch::Tensor out = model.forward(input);
      torch::nn::functional::cross_entropy(out, labels).backward();
    });
    profile.set_step_ms(Median(steps));
    profile.set_step_jitter(UniformJitter(steps));
    for (const strategies::Parameter& p : model.Parameters()) {
      torch::Tensor t = p.tensor;
      t.mutable_grad() = torch::Tensor();
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "profiling ", part_name, " of model ", model.name, " failed: ",
        strategies::ExceptionText(e)));
  }
  return profile;
}

}  // namespace rdmaflow::train
