// File: models.cc
#include "train/models.h"

#include <filesystem>
#include <map>
#include <stdexcept>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "graph_analyzer/torch/export_import.h"
#include "graph_analyzer/torch/exported_program.h"
#include "graph_analyzer/torch/torchscript_import.h"
#include "strategies/exception_text.h"
#include "torch/script.h"
#include "torch/torch.h"
#include "train/script_split.h"

namespace rdmaflow::train {
namespace {

namespace nn = torch::nn;

nn::Conv2d Conv(int in, int out, int kernel, int stride, int padding) {
  return nn::Conv2d(
      nn::Conv2dOptions(in, out, kernel).stride(stride).padding(padding));
}

// Runs modules [begin, end) of `seq` in order.
torch::Tensor RunRange(nn::Sequential& seq, size_t begin, size_t end,
                       torch::Tensor x) {
  for (size_t i = begin; i < end; ++i) x = (seq->begin() + i)->forward(x);
  return x;
}

// Split before the first Linear: its index, and the head's parameter names
// (named_parameters of a Sequential are "<index>.<name>").
Model FromSequential(const std::string& name, nn::Sequential seq) {
  Model model{name, seq.ptr(),
              [seq](const torch::Tensor& x) mutable { return seq->forward(x); }};
  size_t cut = seq->size();
  for (size_t i = 0; i < seq->size(); ++i) {
    if (seq->ptr(i)->as<nn::Linear>() != nullptr) {
      cut = i;
      break;
    }
  }
  model.split.features = [seq, cut](const torch::Tensor& x) mutable {
    return RunRange(seq, 0, cut, x);
  };
  model.split.head = [seq, cut](const torch::Tensor& x) mutable {
    return RunRange(seq, cut, seq->size(), x);
  };
  for (const auto& item : seq->named_parameters()) {
    const size_t index = std::stoul(item.key().substr(0, item.key().find('.')));
    if (index >= cut) model.split.head_parameters.push_back(item.key());
  }
  return model;
}

// Two 3x3 convolutions with an identity shortcut.
struct ResidualBlockImpl : nn::Module {
  explicit ResidualBlockImpl(int channels)
      : conv1(register_module("conv1", Conv(channels, channels, 3, 1, 1))),
        conv2(register_module("conv2", Conv(channels, channels, 3, 1, 1))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::relu(x + conv2(torch::relu(conv1(x))));
  }
  nn::Conv2d conv1, conv2;
};
TORCH_MODULE(ResidualBlock);

struct SmallResNetImpl : nn::Module {
  SmallResNetImpl()
      : stem(register_module("stem", Conv(1, 16, 3, 1, 1))),
        block1(register_module("block1", ResidualBlock(16))),
        down(register_module("down", Conv(16, 32, 3, 2, 1))),
        block2(register_module("block2", ResidualBlock(32))),
        fc(register_module("fc", nn::Linear(32, 10))) {}
  torch::Tensor features(const torch::Tensor& x) {
    torch::Tensor h = block1(torch::relu(stem(x)));
    h = block2(torch::relu(down(h)));
    return h.mean({2, 3});
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc(features(x)); }
  nn::Conv2d stem;
  ResidualBlock block1;
  nn::Conv2d down;
  ResidualBlock block2;
  nn::Linear fc;
};
TORCH_MODULE(SmallResNet);

absl::StatusOr<Model> Build(const std::string& name) {
  if (name == "mlp") {
    return FromSequential(
        name, nn::Sequential(nn::Flatten(), nn::Linear(784, 256), nn::ReLU(),
                             nn::Linear(256, 128), nn::ReLU(),
                             nn::Linear(128, 10)));
  }
  if (name == "lenet5") {
    return FromSequential(
        name,
        nn::Sequential(Conv(1, 6, 5, 1, 2), nn::ReLU(), nn::MaxPool2d(2),
                       Conv(6, 16, 5, 1, 0), nn::ReLU(), nn::MaxPool2d(2),
                       nn::Flatten(), nn::Linear(400, 120), nn::ReLU(),
                       nn::Linear(120, 84), nn::ReLU(), nn::Linear(84, 10)));
  }
  if (name == "vgg") {
    return FromSequential(
        name,
        nn::Sequential(Conv(1, 32, 3, 1, 1), nn::ReLU(), Conv(32, 32, 3, 1, 1),
                       nn::ReLU(), nn::MaxPool2d(2), Conv(32, 64, 3, 1, 1),
                       nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
                       nn::Linear(3136, 1024), nn::ReLU(),
                       nn::Linear(1024, 1024), nn::ReLU(),
                       nn::Linear(1024, 10)));
  }
  if (name == "resnet") {
    SmallResNet net;
    Model model{name, net.ptr(), [net](const torch::Tensor& x) mutable {
                  return net->forward(x);
                }};
    model.split.features = [net](const torch::Tensor& x) mutable {
      return net->features(x);
    };
    model.split.head = [net](const torch::Tensor& h) mutable { return net->fc(h); };
    model.split.head_parameters = {"fc.weight", "fc.bias"};
    return model;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown model '", name, "'; models: ", absl::StrJoin(ModelNames(), ", "),
      ", or a model file (PATH.pt: TorchScript; PATH.pt2: torch.export)"));
}

// Checks that a batch of two samples gives [2, classes] logits.
absl::Status ProbeLogits(const Model& model, const std::string& path,
                         const SampleSpec& sample) {
  std::vector<int64_t> probe_shape = {2};
  probe_shape.insert(probe_shape.end(), sample.shape.begin(), sample.shape.end());
  std::string got;
  try {
    torch::NoGradGuard no_grad;
    // Token ids at both ends of [0, vocab): an embedding too small for
    // --vocab fails here, not in the middle of the job.
    torch::Tensor probe = sample.int64 ? torch::zeros(probe_shape, torch::kInt64)
                                       : torch::zeros(probe_shape);
    if (sample.int64) model.forward(torch::full(probe_shape, sample.vocab - 1, torch::kInt64));
    const auto sizes = model.forward(probe).sizes();
    if (sizes.size() == 2 && sizes[0] == 2 && sizes[1] == sample.classes) {
      return absl::OkStatus();
    }
    got = absl::StrCat("[", absl::StrJoin(sizes, ", "), "]");
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--model ", path, " does not run on samples of --input ", sample.ToString(), ": ",
        strategies::ExceptionText(e)));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--model ", path, ": a batch of 2 samples of --input ", sample.ToString(),
      " gives ", got, "; the harness needs logits [2, ", sample.classes,
      "] (--classes) for its cross-entropy"));
}

// A TorchScript file, in training mode, checked on a batch of two samples.
absl::StatusOr<Model> LoadScript(const std::string& path, const SampleSpec& sample) {
  absl::StatusOr<torch::jit::Module> loaded = graph::LoadTorchScript(path);
  if (!loaded.ok()) {
    return absl::Status(loaded.status().code(),
                        absl::StrCat("--model: ", loaded.status().message()));
  }
  auto script = std::make_shared<torch::jit::Module>(*std::move(loaded));
  script->train(true);
  Model model;
  model.name = std::filesystem::path(path).stem().string();
  model.script = script;
  // The analyzer's view of the same file, for placement (a batch of two:
  // parameter sizes do not depend on it).
  graph::TensorSpec input;
  input.set_dtype(sample.int64 ? graph::DT_INT64 : graph::DT_FLOAT32);
  input.add_shape(2);
  for (int64_t d : sample.shape) input.add_shape(d);
  absl::StatusOr<strategies::ModelSplit> split = SplitScript(script, sample);
  if (split.ok()) {
    model.split = *std::move(split);
  } else {
    model.split_status = split.status();
  }
  absl::StatusOr<graph::GraphDef> imported = graph::ImportTorchScript(path, {input});
  if (imported.ok()) {
    model.graph = std::make_shared<const graph::GraphDef>(*std::move(imported));
  } else {
    model.graph_status = imported.status();
  }
  model.forward = [script](const torch::Tensor& x) {
    return script->forward({x}).toTensor();
  };
  RETURN_IF_ERROR(ProbeLogits(model, path, sample));
  return model;
}

// A torch.export program, run by LibTorch's dispatcher with the file's
// weights (graph_analyzer/torch/exported_program.h): its parameters train,
// its buffers (batch norm statistics) update as the program says.
absl::StatusOr<Model> LoadExported(const std::string& path, const SampleSpec& sample) {
  absl::StatusOr<graph::ExportedProgram> loaded = graph::ExportedProgram::Load(path);
  if (!loaded.ok()) {
    return absl::Status(loaded.status().code(),
                        absl::StrCat("--model: ", loaded.status().message()));
  }
  auto program = std::make_shared<const graph::ExportedProgram>(*std::move(loaded));
  absl::StatusOr<std::map<std::string, at::Tensor>> weights = program->Weights();
  if (!weights.ok()) {
    return absl::Status(weights.status().code(),
                        absl::StrCat("--model: ", weights.status().message()));
  }
  Model model;
  model.name = std::filesystem::path(path).stem().string();
  model.program = program;
  // One value per placeholder; the input's slot is filled per call.
  auto values = std::make_shared<std::vector<at::Tensor>>();
  size_t input = program->placeholders().size();
  absl::flat_hash_map<std::string, at::Tensor> buffers;
  for (size_t i = 0; i < program->placeholders().size(); ++i) {
    const graph::ExportedPlaceholder& ph = program->placeholders()[i];
    if (ph.kind == graph::ExportedPlaceholder::Kind::kUserInput) {
      if (input != program->placeholders().size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--model ", path, " takes several inputs; the harness feeds one"));
      }
      input = i;
      values->emplace_back();
      continue;
    }
    at::Tensor t = weights->at(ph.fqn);
    if (ph.kind == graph::ExportedPlaceholder::Kind::kParameter) {
      if (t.scalar_type() != at::kFloat) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--model ", path, ": parameter ", ph.fqn, " is ", c10::toString(t.scalar_type()),
            "; the harness trains float32 parameters"));
      }
      t.set_requires_grad(true);
      model.program_parameters.push_back({ph.fqn, t});
    } else {
      buffers[ph.fqn] = t;
    }
    values->push_back(t);
  }
  if (input == program->placeholders().size()) {
    return absl::InvalidArgumentError(absl::StrCat("--model ", path, " takes no input"));
  }
  model.split_status = absl::UnimplementedError(
      "presets and TorchScript models are cut; a torch.export program (.pt2) is not: "
      "save the model with torch.jit.trace to cut it");
  graph::TensorSpec spec;
  spec.set_dtype(sample.int64 ? graph::DT_INT64 : graph::DT_FLOAT32);
  spec.add_shape(2);
  for (int64_t d : sample.shape) spec.add_shape(d);
  absl::StatusOr<graph::GraphDef> imported = graph::ImportExportedProgram(path, {spec});
  if (imported.ok()) {
    model.graph = std::make_shared<const graph::GraphDef>(*std::move(imported));
  } else {
    model.graph_status = imported.status();
  }
  model.forward = [program, values, input, buffers](const torch::Tensor& x) {
    std::vector<at::Tensor> run = *values;
    run[input] = x;
    absl::StatusOr<std::vector<c10::IValue>> outputs = program->Run(run);
    if (!outputs.ok()) throw std::runtime_error(std::string(outputs.status().message()));
    // Core ATen programs return new batch norm statistics: keep them.
    torch::NoGradGuard no_grad;
    for (const auto& [index, buffer] : program->buffer_updates()) {
      auto it = buffers.find(buffer);
      if (it != buffers.end()) it->second.copy_((*outputs)[index].toTensor());
    }
    return (*outputs)[program->user_output()].toTensor();
  };
  RETURN_IF_ERROR(ProbeLogits(model, path, sample));
  return model;
}

}  // namespace

std::vector<strategies::Parameter> Model::Parameters() const {
  std::vector<strategies::Parameter> out;
  if (program != nullptr) {
    out = program_parameters;
  } else if (script != nullptr) {
    absl::flat_hash_set<const c10::TensorImpl*> seen;  // tied weights once
    for (const auto& p : script->named_parameters(/*recurse=*/true)) {
      if (seen.insert(p.value.unsafeGetTensorImpl()).second) out.push_back({p.name, p.value});
    }
  } else if (module != nullptr) {
    for (const auto& p : module->named_parameters()) out.push_back({p.key(), p.value()});
  }
  return out;
}

absl::StatusOr<torch::Tensor> Model::Forward(const torch::Tensor& x) const {
  try {
    return forward(x);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", name, " failed on a batch: ", strategies::ExceptionText(e)));
  }
}

std::vector<std::string> ModelNames() { return {"mlp", "lenet5", "vgg", "resnet"}; }

bool IsModelFile(const std::string& name) {
  return absl::EndsWith(name, ".pt") || absl::EndsWith(name, ".pth") ||
         graph::IsExportedProgramFile(name) ||
         name.find('/') != std::string::npos;
}

absl::StatusOr<Model> MakeModel(const std::string& name, uint64_t seed,
                                const SampleSpec& sample) {
  if (graph::IsExportedProgramFile(name)) return LoadExported(name, sample);
  if (IsModelFile(name)) return LoadScript(name, sample);
  if (!sample.IsFashionMnist()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--model ", name, " takes Fashion-MNIST's 1x28x28 images of 10 classes, not "
        "--input ", sample.ToString(), " and --classes ", sample.classes,
        "; bring a TorchScript model for other data (docs/bring_your_model.md)"));
  }
  // Module constructors draw from the default generator: seed it, build,
  // and the parameters are the same in every process.
  torch::manual_seed(seed);
  absl::StatusOr<Model> model = Build(name);
  if (!model.ok()) return model;
  // The shape of one sample's activations at the split.
  torch::NoGradGuard no_grad;
  model->split.sample_shape = {1, 28, 28};
  torch::Tensor probe = model->split.features(torch::zeros({1, 1, 28, 28}));
  model->split.activation_shape.assign(probe.sizes().begin() + 1, probe.sizes().end());
  return model;
}

}  // namespace rdmaflow::train
