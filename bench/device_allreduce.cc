// File: device_allreduce.cc
#include "bench/device_allreduce.h"

#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/device_copy.h"
#include "common/status_macros.h"
#include "rdma/device/close_mappings.h"
#include "rdma/rendezvous.h"

namespace rdmaflow::bench {

absl::StatusOr<std::unique_ptr<DeviceAllReduceBench>> DeviceAllReduceBench::Create(
    std::unique_ptr<rdma::Transport> host, std::unique_ptr<device::DeviceRuntime> runtime,
    rdma::Store& store, const DeviceAllReduceBenchOptions& options) {
  if (options.capacity_bytes <= 0 || options.world < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a device all-reduce bench of ", options.capacity_bytes, " bytes on ", options.world,
        " ranks"));
  }
  std::unique_ptr<DeviceAllReduceBench> out(new DeviceAllReduceBench());
  out->options_ = options;
  out->store_ = &store;
  out->runtime_ = std::move(runtime);
  ASSIGN_OR_RETURN(out->transport_, rdma::device_path::DeviceTransport::Create(
                                        std::move(host), out->runtime_.get()));
  onesided::ProgressLoopOptions loop_options;
  loop_options.name = absl::StrCat("allreduce_bench device rank ", options.rank);
  out->loop_ = std::make_unique<onesided::ProgressLoop>(*out->transport_, loop_options);
  ASSIGN_OR_RETURN(out->stream_, out->runtime_->CreateStream());
  ASSIGN_OR_RETURN(out->done_, out->runtime_->CreateEvent());
  collectives::AllReduceGroupOptions group;
  group.ring.name = out->impl();
  group.ring.capacity_bytes = static_cast<size_t>(options.capacity_bytes);
  group.ring.chunk_bytes = static_cast<size_t>(options.ring_chunk_bytes);
  group.ring.timeout = options.timeout;
  group.ring.loop = out->loop_.get();
  group.direct = options.ring ? collectives::DirectAccess::kOff : collectives::DirectAccess::kAuto;
  group.device = out->transport_.get();
  group.device_one_shot_max_bytes = static_cast<size_t>(options.one_shot_max_bytes);
  group.device_chunk_bytes = static_cast<size_t>(options.chunk_bytes);
  std::vector<int> members(options.world);
  std::iota(members.begin(), members.end(), 0);
  ASSIGN_OR_RETURN(out->group_, collectives::AllReduceGroup::Create(
                                    *out->transport_, store, "bench-device", members, group));
  return out;
}

std::string DeviceAllReduceBench::impl() const {
  return options_.ring ? "rdmaflow-device-ring" : "rdmaflow-device";
}

DeviceAllReduceBench::~DeviceAllReduceBench() = default;

absl::StatusOr<double> DeviceAllReduceBench::CopyGbps(int64_t bytes, int iterations) {
  const int64_t half = options_.capacity_bytes / 2;
  if (bytes <= 0 || bytes > half) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a reference device copy of ", bytes, " bytes in a region of ",
        options_.capacity_bytes));
  }
  ASSIGN_OR_RETURN(const double seconds,
                   DeviceCopySeconds(*stream_, *done_, group_->data() + half,
                                     group_->data(), static_cast<size_t>(bytes), iterations));
  return 2.0 * static_cast<double>(bytes) / seconds / 1e9;
}

absl::StatusOr<AllReduceRow> DeviceAllReduceBench::Measure(int64_t bytes, int iterations,
                                                          double copy_gbps) {
  const size_t count = static_cast<size_t>(bytes) / sizeof(float);
  std::vector<float> host(count, static_cast<float>(options_.rank + 1));
  RETURN_IF_ERROR(CopyAndDrain(*stream_, *done_, group_->data(), host.data(), count * 4,
                               "uploading the all-reduce's input"));
  RETURN_IF_ERROR(group_->AllReduce(0, count, collectives::DataType::kFloat32));
  RETURN_IF_ERROR(CopyAndDrain(*stream_, *done_, host.data(), group_->data(), count * 4,
                               "downloading the all-reduce's result"));
  const int n = options_.world;
  const float expected = n * (n + 1) / 2.0f;
  for (size_t i = 0; i < count; ++i) {
    if (host[i] != expected) {
      return absl::InternalError(absl::StrCat("device all-reduce of ", bytes, " bytes: element ",
                                              i, " is ", host[i], ", expected ", expected));
    }
  }
  std::fill(host.begin(), host.end(), 0.0f);
  RETURN_IF_ERROR(CopyAndDrain(*stream_, *done_, group_->data(), host.data(), count * 4,
                               "zeroing the all-reduce's input"));
  RETURN_IF_ERROR(rdma::Barrier(*store_, "bench", absl::StrCat(impl(), "/", bytes), n,
                                options_.timeout));
  absl::Status status;
  const double us = TimeCalls(2, iterations, [&] {
    if (status.ok()) status = group_->AllReduce(0, count, collectives::DataType::kFloat32);
  });
  RETURN_IF_ERROR(status);
  AllReduceRow row = MakeRow(impl(), n, bytes, iterations, us);
  const collectives::AllReduceAlgorithm took = group_->last_algorithm();
  const bool one_shot = took == collectives::AllReduceAlgorithm::kHostOneShot;
  const bool on_device = one_shot || took == collectives::AllReduceAlgorithm::kHostScatterGather;
  row.set_algorithm(one_shot    ? "device-one-shot"
                    : on_device ? "device-scatter-gather"
                                : "device-" + collectives::AlgorithmName(took));
  if (copy_gbps > 0 && on_device) {
    const double s = static_cast<double>(bytes);
    const double moved = one_shot ? (n + 1) * s + 2 * s : ((n + 1) * s + 2.0 * (n - 1) * s) / n;
    row.set_reduce_bound_gbps(copy_gbps * s / (n * moved));
  }
  return row;
}

absl::Status DeviceAllReduceBench::Shutdown() {
  // Nobody reads a peer's region after the group's shutdown; all close
  // their mappings of them before any frees its own (the destructor).
  RETURN_IF_ERROR(group_->Shutdown());
  // A namespace per bench: each rank runs several (a barrier's name is
  // good for one use).
  return rdma::device_path::CloseMappingsTogether(*transport_, *store_,
                                                  absl::StrCat("bench/", impl()), options_.world,
                                                  absl::Now() + options_.timeout);
}

}  // namespace rdmaflow::bench
