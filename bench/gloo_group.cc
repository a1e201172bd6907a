// File: gloo_group.cc
#include "bench/gloo_group.h"


#include <chrono>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gloo/allreduce.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"

namespace rdmaflow::bench {
namespace {

// The job's rdma::Store as Gloo's rendezvous store. Gloo reports failures
// as exceptions, so a store error becomes one (caught in Create()).
class RendezvousStore final : public gloo::rendezvous::Store {
 public:
  RendezvousStore(rdma::Store& store, absl::Duration timeout)
      : store_(store), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Check(store_.Set(key, std::string(data.begin(), data.end())), key);
  }
  std::vector<char> get(const std::string& key) override {
    absl::StatusOr<std::string> value = store_.Get(key, timeout_);
    Check(value.status(), key);
    return std::vector<char>(value->begin(), value->end());
  }
  void wait(const std::vector<std::string>& keys) override {
    Check(store_.Wait(keys, timeout_), keys.empty() ? "" : keys.front());
  }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    Check(store_.Wait(keys, absl::FromChrono(timeout)), keys.empty() ? "" : keys.front());
  }

 private:
  static void Check(const absl::Status& status, const std::string& key) {
    if (!status.ok()) {
      throw std::runtime_error(absl::StrCat("the store, key '", key, "': ", status.ToString()));
    }
  }

  rdma::Store& store_;
  const absl::Duration timeout_;
};

}  // namespace

struct GlooGroup::State {
  std::unique_ptr<RendezvousStore> store;
  std::shared_ptr<gloo::rendezvous::Context> context;
};

GlooGroup::GlooGroup(std::unique_ptr<State> state) : state_(std::move(state)) {}
GlooGroup::~GlooGroup() = default;

absl::StatusOr<std::unique_ptr<GlooGroup>> GlooGroup::Create(
    int rank, int world, rdma::Store& store, absl::Duration timeout) {
  auto state = std::make_unique<State>();
  try {
    state->store = std::make_unique<RendezvousStore>(store, timeout);
    gloo::rendezvous::PrefixStore prefixed("gloo", *state->store);
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    state->context = std::make_shared<gloo::rendezvous::Context>(rank, world);
    state->context->setTimeout(std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
    state->context->connectFullMesh(prefixed, device);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("rank ", rank, ": connecting the Gloo group: ", e.what()));
  }
  return std::unique_ptr<GlooGroup>(new GlooGroup(std::move(state)));
}

absl::Status GlooGroup::AllReduce(at::Tensor& tensor) {
  if (tensor.scalar_type() != at::kFloat || !tensor.is_contiguous() || !tensor.is_cpu()) {
    return absl::InvalidArgumentError("Gloo all-reduce: takes a contiguous float32 CPU tensor");
  }
  try {
    gloo::AllreduceOptions options(state_->context);
    options.setOutput(tensor.data_ptr<float>(), static_cast<size_t>(tensor.numel()));
    options.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    gloo::allreduce(options);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("Gloo all-reduce: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace rdmaflow::bench
