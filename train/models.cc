// File: models.cc
#include "train/models.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rdmaflow::train {
namespace {

namespace nn = torch::nn;

nn::Conv2d Conv(int in, int out, int kernel, int stride, int padding) {
  return nn::Conv2d(
      nn::Conv2dOptions(in, out, kernel).stride(stride).padding(padding));
}

Model FromSequential(const std::string& name, nn::Sequential seq) {
  return Model{name, seq.ptr(),
               [seq](const torch::Tensor& x) mutable { return seq->forward(x); }};
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
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = block1(torch::relu(stem(x)));
    h = block2(torch::relu(down(h)));
    return fc(h.mean({2, 3}));
  }
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
    return Model{name, net.ptr(), [net](const torch::Tensor& x) mutable {
                   return net->forward(x);
                 }};
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown model '", name, "'; models: ", absl::StrJoin(ModelNames(), ", ")));
}

}  // namespace

std::vector<std::string> ModelNames() { return {"mlp", "lenet5", "vgg", "resnet"}; }

absl::StatusOr<Model> MakeModel(const std::string& name, uint64_t seed) {
  // Module constructors draw from the default generator: seed it, build,
  // and the parameters are the same in every process.
  torch::manual_seed(seed);
  return Build(name);
}

}  // namespace rdmaflow::train
