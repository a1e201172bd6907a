// File: gloo_group.cc
#include "bench/gloo_group.h"

#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "torch/csrc/distributed/c10d/ProcessGroupGloo.hpp"
#include "torch/csrc/distributed/c10d/TCPStore.hpp"

namespace rdmaflow::bench {

struct GlooGroup::State {
  c10::intrusive_ptr<c10d::TCPStore> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
};

GlooGroup::GlooGroup(std::unique_ptr<State> state) : state_(std::move(state)) {}
GlooGroup::~GlooGroup() = default;

absl::StatusOr<std::unique_ptr<GlooGroup>> GlooGroup::Create(
    int rank, int world, rdma::Store& store, absl::Duration timeout) {
  auto state = std::make_unique<State>();
  const std::chrono::milliseconds ms(absl::ToInt64Milliseconds(timeout));
  try {
    c10d::TCPStoreOptions options;
    options.isServer = rank == 0;
    options.numWorkers = world;
    options.waitWorkers = false;
    options.timeout = ms;
    if (rank == 0) {
      options.port = 0;
      state->store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
      absl::Status published =
          store.Set("gloo/port", absl::StrCat(state->store->getPort()));
      if (!published.ok()) return published;
    } else {
      absl::StatusOr<std::string> port = store.Get("gloo/port", timeout);
      if (!port.ok()) return port.status();
      int value = 0;
      if (!absl::SimpleAtoi(*port, &value)) {
        return absl::InvalidArgumentError(absl::StrCat("gloo/port is '", *port, "'"));
      }
      options.port = static_cast<uint16_t>(value);
      state->store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
    }
    auto pg_options = c10d::ProcessGroupGloo::Options::create(ms);
    pg_options->devices.push_back(
        c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    state->group = c10::make_intrusive<c10d::ProcessGroupGloo>(
        state->store, rank, world, pg_options);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("rank ", rank, ": creating the Gloo process group: ", e.what()));
  }
  return std::unique_ptr<GlooGroup>(new GlooGroup(std::move(state)));
}

absl::Status GlooGroup::AllReduce(torch::Tensor& tensor) {
  try {
    std::vector<at::Tensor> tensors = {tensor};
    state_->group->allreduce(tensors)->wait();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("Gloo all-reduce: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace rdmaflow::bench
