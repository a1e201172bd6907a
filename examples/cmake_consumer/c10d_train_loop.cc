// c10d_train_loop: a LibTorch data-parallel training loop whose gradients
// are all-reduced by rdmaflow's c10d backend, built by CMake against an
// installed rdmaflow (CMakeLists.txt). Each rank fits the same linear model
// to its own samples of y = x w + 0.5; after every backward pass the ranks
// average their gradients with ProcessGroup::allreduce. At the end it
// checks that the loss fell and that every rank holds the same parameters.
// Run two or more ranks under torchrun:
//   torchrun --standalone --redirects 1 --tee 1 --nproc_per_node=2 --no_python build/c10d_train_loop [STEPS]
// (--redirects 1 --tee 1: Debian's torch 1.13 needs them; docs/torch.md.)
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "rdma/torch/tcp_store.h"
#include "torch_backend/backend_options.h"
#include "torch_backend/process_group_rdmaflow.h"

namespace {

using rdmaflow::torch_backend::BackendOptions;
using rdmaflow::torch_backend::ProcessGroupRdmaflow;

constexpr int kFeatures = 16;
constexpr int kBatch = 32;

// Sums `tensor` over the ranks in place (one c10d all-reduce).
void AllReduce(c10d::Backend& group, at::Tensor& tensor) {
  std::vector<at::Tensor> tensors{tensor};
  group.allreduce(tensors)->wait();
}

absl::Status Train(int steps) {
  ASSIGN_OR_RETURN(rdmaflow::rdma::torch::TcpStoreOptions store_options,
                   rdmaflow::rdma::torch::TcpStoreOptions::FromEnvironment());
  ASSIGN_OR_RETURN(auto store, rdmaflow::rdma::torch::TcpStore::Create(store_options));
  const int rank = store_options.rank;
  const int world = store_options.world_size;
  ASSIGN_OR_RETURN(BackendOptions options, BackendOptions::FromEnvironment(absl::Minutes(1)));
  ASSIGN_OR_RETURN(auto group,
                   ProcessGroupRdmaflow::Create(store->store(), rank, world, options));

  torch::manual_seed(0);  // the same initial model on every rank
  torch::nn::Linear model(kFeatures, 1);
  torch::optim::SGD optimizer(model->parameters(), /*lr=*/0.05);
  const at::Tensor true_weight = torch::randn({kFeatures, 1});
  double first_loss = 0;
  double last_loss = 0;
  for (int step = 0; step < steps; ++step) {
    torch::manual_seed(1000 + step * world + rank);  // this rank's samples
    const at::Tensor x = torch::randn({kBatch, kFeatures});
    const at::Tensor y = x.mm(true_weight) + 0.5;
    optimizer.zero_grad();
    at::Tensor loss = torch::mse_loss(model->forward(x), y);
    loss.backward();
    for (at::Tensor& parameter : model->parameters()) {
      at::Tensor grad = parameter.grad();
      AllReduce(*group, grad);
      grad.div_(world);
    }
    optimizer.step();
    at::Tensor mean_loss = loss.detach().clone();
    AllReduce(*group, mean_loss);
    last_loss = mean_loss.item<double>() / world;
    if (step == 0) first_loss = last_loss;
  }
  if (!(last_loss < first_loss / 10)) {
    return absl::InternalError(absl::StrCat("the loss went from ", first_loss, " to ",
                                            last_loss, ": training did not converge"));
  }
  // Identical parameters: every rank's sum over the ranks is world x its own.
  for (const at::Tensor& parameter : model->parameters()) {
    at::Tensor sum = parameter.detach().clone();
    AllReduce(*group, sum);
    if (!torch::allclose(sum, parameter.detach() * world, /*rtol=*/0, /*atol=*/1e-6)) {
      return absl::InternalError(
          absl::StrCat("rank ", rank, ": its parameters differ from the other ranks'"));
    }
  }
  std::printf("c10d_train_loop: rank %d of %d: loss %.4f -> %.6f in %d steps, "
              "parameters identical on every rank\n",
              rank, world, first_loss, last_loss, steps);
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 200;
  if (steps <= 0) {
    std::fprintf(stderr, "usage: %s [STEPS > 0]   (run under torchrun)\n", argv[0]);
    return 2;
  }
  absl::Status status;
  try {  // LibTorch reports errors as c10::Error exceptions
    status = Train(steps);
  } catch (const std::exception& e) {
    status = absl::InternalError(e.what());
  }
  if (!status.ok()) {
    std::fprintf(stderr, "c10d_train_loop: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
