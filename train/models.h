// File: models.h
// -----------------------------------------------------------------------------
// The harness's models, LibTorch C++ modules for 1x28x28 inputs, 10 classes:
//   mlp     784-256-128-10, ReLU                                (235 K params)
//   lenet5  LeNet-5: conv 6@5x5, pool, conv 16@5x5, pool, FC 120-84-10 (62 K)
//   vgg     VGG-like: conv 32-32, pool, conv 64, pool, FC 3136-1024-1024-10;
//           the FC layers hold 97 % of its 4.3 M parameters
//   resnet  a small ResNet: stem conv 16, a residual block, a strided conv to
//           32, a residual block, global average pooling, FC 10 (no batch
//           norm: all its state is parameters)                  (33 K)
// or a user's model: a TorchScript file (torch.jit.save of a traced or
// scripted module) or a torch.export program (torch.export.save: .pt2), any
// input shape and class count (sample_spec.h).
#ifndef RDMAFLOW_TRAIN_MODELS_H_
#define RDMAFLOW_TRAIN_MODELS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ATen/core/Tensor.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph_analyzer/graph.pb.h"
#include "strategies/strategy.h"
#include "train/sample_spec.h"

// Declared, not included: their headers (torch/torch.h, torch/script.h)
// cost every file that includes this one half a minute of compile time.
// models.cc, and the files that use the modules, include them.
namespace torch::nn {
class Module;
}  // namespace torch::nn
namespace torch::jit {
struct Module;
}  // namespace torch::jit
namespace rdmaflow::graph {
class ExportedProgram;
}  // namespace rdmaflow::graph

namespace rdmaflow::train {

// A model: its module (parameters), its forward function, and the same
// forward cut before the first fully connected layer (for layer_separated;
// mlp's features are just the flattening). Value type (shares the module).
struct Model {
  std::string name;
  std::shared_ptr<torch::nn::Module> module;  // a preset
  std::function<at::Tensor(const at::Tensor&)> forward;
  // Features and head (layer_separated): the presets as written, a
  // TorchScript model before its first fully connected layer
  // (script_split.h; `split_status` says why when it cannot be cut).
  strategies::ModelSplit split;
  absl::Status split_status;
  std::shared_ptr<torch::jit::Module> script;  // a TorchScript file
  // A torch.export file: the program forward runs, and its parameters
  // (the file's weights, trained in place).
  std::shared_ptr<const graph::ExportedProgram> program;
  std::vector<strategies::Parameter> program_parameters;
  // A model file's single-rank training graph, as the analyzer imports it
  // (graph_analyzer/torch/torchscript_import.h, export_import.h), for strategies
  // that place the model as planned; null for presets, and when the
  // import failed (`graph_status` says why: the model still trains).
  std::shared_ptr<const graph::GraphDef> graph;
  absl::Status graph_status;

  // The trainable parameters by qualified name, in the module's order
  // (a parameter shared by two submodules once, under its first name).
  std::vector<strategies::Parameter> Parameters() const;
  // forward(x), with whatever LibTorch throws (a token id out of an
  // embedding's range, a shape the model does not take) as
  // kInvalidArgument naming the model.
  absl::StatusOr<at::Tensor> Forward(const at::Tensor& x) const;
};

// The names above.
std::vector<std::string> ModelNames();

// True when --model names a file (a path ending in .pt, .pth or .pt2, or
// holding a '/') rather than a preset.
bool IsModelFile(const std::string& name);

// Builds preset `name` with parameters drawn from a generator seeded with
// `seed` (same seed, same parameters, in every process), or loads the
// TorchScript file `name` (the same file everywhere: the same parameters)
// and checks that a batch of `sample`s gives [batch, classes] logits.
// kInvalidArgument listing the models for an unknown name, naming the file
// that is no TorchScript, or saying what the model's output was.
absl::StatusOr<Model> MakeModel(const std::string& name, uint64_t seed,
                                const SampleSpec& sample = {});

}  // namespace rdmaflow::train

#endif  // RDMAFLOW_TRAIN_MODELS_H_
