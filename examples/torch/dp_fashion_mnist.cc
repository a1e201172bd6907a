// dp_fashion_mnist: a LibTorch C++ data-parallel training loop on
// Fashion-MNIST over the rdmaflow c10d backend; the loop only sees a
// c10d::Backend. (LibTorch's C++ ProcessGroupGloo cannot be built against a
// torch wheel: the wheel ships no gloo headers, and Debian's differ from
// the gloo inside libtorch_cpu. The Python example compares with Gloo.) The
// the gradients live in one registered tensor (each parameter's .grad is a
// view of it), so backward writes them where the all-reduce reads them and
// nothing is copied. Launch with torchrun (docs/torch.md):
//
//   tools/torchrun.sh --nproc_per_node=2 --no_python bazel-bin/examples/torch/dp_fashion_mnist --backend=rdmaflow
//
// Rank r takes samples r, r + world, ... of each global batch, drawn from a
// permutation of the training set seeded like the Python example's.
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/program_flags.h"
#include "common/status_macros.h"
#include "rdma/torch/tcp_store.h"
#include "torch_backend/process_group_rdmaflow.h"
#include "train/fashion_mnist.h"
#include "train/models.h"

ABSL_FLAG(std::string, backend, "rdmaflow", "c10d backend (rdmaflow only; see the file's comment on Gloo)");
ABSL_FLAG(std::string, model, "lenet5", "lenet5 or vgg (see train/models.h)");
ABSL_FLAG(int, steps, 300, "training steps");
ABSL_FLAG(int, batch, 64, "global batch size (a multiple of the world size)");
ABSL_FLAG(double, lr, 0.05, "SGD learning rate (momentum 0.9)");
ABSL_FLAG(int, seed, 0, "seed of the parameters and of the sample order");
ABSL_FLAG(std::string, data, rdmaflow::train::kDefaultFashionMnistDir,
          "Fashion-MNIST idx files");
ABSL_FLAG(int, eval_samples, 2000, "test images evaluated at the end");
ABSL_FLAG(int, log_every, 50, "steps between progress lines");
ABSL_FLAG(std::string, save_params, "",
          "rank 0 writes the final parameters here (raw float32, in order)");

namespace rdmaflow {
namespace {

struct Group {
  std::unique_ptr<rdma::torch::TcpStore> store;
  c10::intrusive_ptr<c10d::Backend> pg;
  c10::intrusive_ptr<torch_backend::ProcessGroupRdmaflow> rdmaflow;  // or null
  int rank = 0;
  int world = 1;
};

absl::StatusOr<Group> JoinGroup(const std::string& backend) {
  ASSIGN_OR_RETURN(rdma::torch::TcpStoreOptions options,
                   rdma::torch::TcpStoreOptions::FromEnvironment());
  Group group;
  group.rank = options.rank;
  group.world = options.world_size;
  ASSIGN_OR_RETURN(group.store, rdma::torch::TcpStore::Create(options));
  auto store = c10::make_intrusive<c10d::PrefixStore>(backend, group.store->store());
  if (backend == "rdmaflow") {
    ASSIGN_OR_RETURN(torch_backend::BackendOptions backend_options,
                     torch_backend::BackendOptions::FromEnvironment(absl::Minutes(5)));
    ASSIGN_OR_RETURN(group.rdmaflow, torch_backend::ProcessGroupRdmaflow::Create(
                                         store, group.rank, group.world, backend_options));
    group.pg = group.rdmaflow;
    return group;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--backend=", backend,
      ": only rdmaflow (Gloo's C++ group needs gloo headers that match libtorch_cpu's; "
      "compare with Gloo in examples/torch/ddp_fashion_mnist.py)"));
}

// One tensor holding every gradient, each parameter's .grad a view of it:
// registered memory (all-reduced in place), or ordinary memory.
absl::StatusOr<torch::Tensor> FlatGradients(Group& group,
                                            std::vector<torch::Tensor>& parameters) {
  int64_t total = 0;
  for (const torch::Tensor& p : parameters) total += p.numel();
  torch::Tensor flat;
  if (group.rdmaflow) {
    ASSIGN_OR_RETURN(flat, group.rdmaflow->AllocateRegistered({total}, torch::kFloat));
  } else {
    flat = torch::empty({total}, torch::kFloat);
  }
  flat.zero_();
  int64_t at = 0;
  for (torch::Tensor& p : parameters) {
    p.mutable_grad() = flat.narrow(0, at, p.numel()).view_as(p);
    at += p.numel();
  }
  return flat;
}

absl::Status Wait(const c10::intrusive_ptr<c10d::Work>& work) {
  try {
    work->wait();
  } catch (const std::exception& e) {
    return absl::InternalError(e.what());
  }
  return absl::OkStatus();
}

absl::Status Train() {
  const std::string backend = absl::GetFlag(FLAGS_backend);
  ASSIGN_OR_RETURN(Group group, JoinGroup(backend));
  const int batch = absl::GetFlag(FLAGS_batch);
  if (batch % group.world != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--batch=", batch, " is not a multiple of the ", group.world, " ranks"));
  }
  ASSIGN_OR_RETURN(train::Model model,
                   train::MakeModel(absl::GetFlag(FLAGS_model), absl::GetFlag(FLAGS_seed)));
  std::vector<torch::Tensor> parameters = model.module->parameters();
  ASSIGN_OR_RETURN(torch::Tensor gradients, FlatGradients(group, parameters));
  torch::optim::SGD optimizer(
      parameters, torch::optim::SGDOptions(absl::GetFlag(FLAGS_lr)).momentum(0.9));
  ASSIGN_OR_RETURN(train::Dataset data,
                   train::LoadFashionMnist(absl::GetFlag(FLAGS_data), "train"));
  auto generator = at::make_generator<at::CPUGeneratorImpl>(absl::GetFlag(FLAGS_seed));
  const torch::Tensor order = torch::randperm(data.size(), generator);
  const int steps = absl::GetFlag(FLAGS_steps);
  const absl::Time start = absl::Now();
  for (int step = 0; step < steps; ++step) {
    const int64_t first = (int64_t{step} * batch) % (data.size() - batch);
    const torch::Tensor mine =
        order.slice(0, first + group.rank, first + batch, group.world);
    torch::Tensor loss = torch::nn::functional::cross_entropy(
        model.forward(data.images.index_select(0, mine)), data.labels.index_select(0, mine));
    gradients.zero_();  // every .grad at once (zero_grad() would detach the views)
    loss.backward();
    std::vector<at::Tensor> all = {gradients};
    RETURN_IF_ERROR(Wait(group.pg->allreduce(all)));
    gradients.div_(group.world);
    optimizer.step();
    if (group.rank == 0 && ((step + 1) % absl::GetFlag(FLAGS_log_every) == 0 ||
                            step + 1 == steps)) {
      std::printf("step %d/%d  loss %.4f  %.1f steps/s\n", step + 1, steps,
                  loss.item<float>(), (step + 1) / absl::ToDoubleSeconds(absl::Now() - start));
      std::fflush(stdout);
    }
  }
  const double ms_per_step = absl::ToDoubleMilliseconds(absl::Now() - start) / steps;
  ASSIGN_OR_RETURN(train::Dataset test,
                   train::LoadFashionMnist(absl::GetFlag(FLAGS_data), "test"));
  const int64_t n = std::min<int64_t>(absl::GetFlag(FLAGS_eval_samples), test.size());
  torch::NoGradGuard no_grad;
  const double accuracy = model.forward(test.images.slice(0, 0, n))
                              .argmax(1)
                              .eq(test.labels.slice(0, 0, n))
                              .to(torch::kFloat)
                              .mean()
                              .item<double>();
  if (group.rank == 0) {
    std::printf("%s: %d ranks, %d steps, test accuracy %.4f, %.2f ms/step\n",
                backend.c_str(), group.world, steps, accuracy, ms_per_step);
    if (const std::string path = absl::GetFlag(FLAGS_save_params); !path.empty()) {
      std::ofstream out(path, std::ios::binary);
      for (const torch::Tensor& p : parameters) {
        const torch::Tensor c = p.detach().contiguous();
        out.write(static_cast<const char*>(c.data_ptr()), c.numel() * sizeof(float));
      }
      if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", path));
    }
  }
  // Every rank finishes its steps before any tears down.
  return Wait(group.pg->barrier());
}

}  // namespace
}  // namespace rdmaflow

int main(int argc, char** argv) {
  rdmaflow::ParseProgramFlags(argc, argv,
      "Data-parallel Fashion-MNIST over the rdmaflow c10d backend.\n"
      "Launch with torchrun: tools/torchrun.sh --nproc_per_node=2 --no_python "
      "bazel-bin/examples/torch/dp_fashion_mnist --backend=rdmaflow");
  // Checked before the process group forms, so a typo is a usage error.
  const char* bad_flag = nullptr;
  if (absl::GetFlag(FLAGS_steps) < 1) bad_flag = "--steps must be at least 1";
  if (absl::GetFlag(FLAGS_batch) < 1) bad_flag = "--batch must be at least 1";
  if (absl::GetFlag(FLAGS_log_every) < 1) bad_flag = "--log_every must be at least 1";
  if (absl::GetFlag(FLAGS_eval_samples) < 0) bad_flag = "--eval_samples must be at least 0";
  if (!(absl::GetFlag(FLAGS_lr) > 0)) bad_flag = "--lr must be positive";
  if (bad_flag != nullptr) {
    std::fprintf(stderr, "dp_fashion_mnist: %s (see dp_fashion_mnist --help)\n", bad_flag);
    return rdmaflow::kExitUsage;
  }
  absl::Status status;
  try {
    status = rdmaflow::Train();
  } catch (const std::exception& e) {
    status = absl::InternalError(absl::StrCat("LibTorch: ", e.what()));
  }
  if (!status.ok()) {
    std::fprintf(stderr, "dp_fashion_mnist: %s\n", status.ToString().c_str());
    return rdmaflow::kExitFailure;
  }
  return rdmaflow::kExitOk;
}
