// End to end: device tensors through the rdmaflow c10d process group
// between OS processes, on the fake device (RDMAFLOW_DEVICE=fake), which
// stands in for CUDA here: a "device tensor" is a CPU tensor over the fake
// device's memory, and each rank names a stream of it as its current one
// (SetFakeCurrentStream), as torch.cuda.set_stream would. Every device
// operation runs 20 ms late (FakeDeviceOptions::operation_delay), so a
// call that read its tensor before the caller's stream got there, or a
// Work that completed before its outputs were back on the device, shows.
//   - float32 all-reduces on the device (DeviceAllReduce: a 1 MiB device
//     region, so larger tensors go in pieces), the rest through host twins.
//   - Every collective and send/recv with device tensors whose values the
//     caller's stream writes just before the call (the call must wait for
//     it), against a local reference; mixed device inputs and host outputs;
//     the Future's value is the caller's own device tensors; the copies are
//     counted.
//   - Refusals, at once and on every rank: a non-contiguous device tensor;
//     a thread with no current stream.
//   - A device fault in one rank's copy back fails that rank's Work with
//     the device's error while its peer completes; the next call on a new
//     staging stream works.
//   - A group broken by a timed-out all-reduce frees none of the device
//     memory its live peer still maps (its pinned sends), counted by the
//     fake device.
// RDMAFLOW_TEST_DEVICE=cuda runs the same cases with CUDA tensors on GPU 0
// (tools/gpu_check.sh): the test loads torch's CUDA library, the caller's
// stream is torch's current one, and a chain of matrix products queued
// before each upload keeps that stream busy; the fault and the
// no-current-stream cases are the fake device's only. Without a GPU those
// runs skip, naming why.
// The test binary re-executes itself per rank (launch/ranks_or_tests_main.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "device/device_runtime.h"
#include "device/fake/fake_device.h"
#include "gtest/gtest.h"
#include "launch/launcher.h"
#include "launch/ranks_or_tests_main.h"
#include "rdma/torch/tcp_store.h"
#include "runtime/torch/torch_cuda.h"
#include "torch_backend/process_group_rdmaflow.h"
#include "tests/torch_backend_test_util.h"
#include "torch_backend/device_p2p.h"
#include "torch_backend/tensor_device.h"

namespace rdmaflow {
namespace {

using torch_backend::ProcessGroupRdmaflow;
using torch_backend::TensorDevice;

constexpr char kCaseEnv[] = "RDMAFLOW_DEVICE_PG_TEST_CASE";
constexpr char kDeviceEnv[] = "RDMAFLOW_TEST_DEVICE";
constexpr absl::Duration kOperationDelay = absl::Milliseconds(20);
// The fake device's allocations past this refuse IPC export (as torch's
// expandable segments' do): more than the device all-reduce's region (3 MiB
// here), so only the test's large tensors.
constexpr int64_t kIpcExportLimit = int64_t{7} << 19;  // 3.5 MiB

bool OnCuda() {
  const char* device = std::getenv(kDeviceEnv);
  return device != nullptr && std::string(device) == "cuda";
}

using runtime::torch::LoadTorchCuda;

// Skips where no GPU answers; a CUDA library loaded too late fails.
#define SKIP_WITHOUT_GPU()                                                            \
  if (OnCuda()) {                                                                     \
    if (absl::Status gpu = LoadTorchCuda(); absl::IsUnavailable(gpu)) {               \
      GTEST_SKIP() << kDeviceEnv << "=cuda, but no GPU answers: " << gpu.message();   \
    } else {                                                                          \
      ASSERT_TRUE(gpu.ok()) << gpu;                                                   \
    }                                                                                 \
  }

using testing::AllRanksUp;
using testing::Check;
using testing::Values;
using testing::Wait;

// One rank: its group, the group's fake device, and the stream it calls
// from (its "current stream").
struct Rank {
  std::unique_ptr<rdma::torch::TcpStore> store;
  c10::intrusive_ptr<ProcessGroupRdmaflow> pg;
  int rank = 0;
  int world = 0;
  TensorDevice* device = nullptr;
  std::unique_ptr<device::Stream> stream;
  // Host tensors the stream still reads from: kept until the rank ends.
  std::vector<at::Tensor> sources;

  ~Rank() {
    torch_backend::SetFakeCurrentStream(nullptr);
    stream.reset();  // before the group's device
    pg.reset();
  }

  // A device tensor of `shape`, uninitialized (the fake device's: 0xFF
  // bytes).
  absl::StatusOr<at::Tensor> Empty(std::vector<int64_t> shape, at::ScalarType dtype) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    ASSIGN_OR_RETURN(at::Tensor flat, device->Empty(n, dtype, "a test's tensor"));
    return flat.view(shape);
  }

  // A device tensor that the caller's stream fills with `values` (later:
  // the device runs 20 ms late).
  absl::StatusOr<at::Tensor> Upload(const at::Tensor& values) {
    ASSIGN_OR_RETURN(at::Tensor tensor,
                     Empty(values.sizes().vec(), values.scalar_type()));
    if (OnCuda()) {
      // Keeps torch's current stream busy for a while, then writes: a call
      // that did not wait for the stream reads what was there before.
      at::Tensor m = at::ones({2048, 2048}, at::TensorOptions().device(at::kCUDA)) / 2048;
      for (int i = 0; i < 8; ++i) m = at::mm(m, m);
      sources.push_back(m);
      at::Tensor pinned = values.contiguous().pin_memory();
      sources.push_back(pinned);
      tensor.copy_(pinned, /*non_blocking=*/true);
      return tensor;
    }
    at::Tensor source = values.contiguous();
    sources.push_back(source);
    RETURN_IF_ERROR(stream->Copy(tensor.data_ptr(), source.data_ptr(),
                                 source.numel() * source.element_size()));
    return tensor;
  }

  // What a device tensor holds once the caller's stream got there.
  absl::StatusOr<at::Tensor> Download(const at::Tensor& tensor) {
    if (OnCuda()) return tensor.to(at::kCPU);  // after the current stream's work
    at::Tensor host = at::empty(tensor.sizes(), tensor.options());
    RETURN_IF_ERROR(stream->Copy(host.data_ptr(), tensor.data_ptr(),
                                 tensor.numel() * tensor.element_size()));
    ASSIGN_OR_RETURN(std::unique_ptr<device::Event> done, device->runtime().CreateEvent());
    RETURN_IF_ERROR(stream->Record(*done));
    RETURN_IF_ERROR(done->WaitUntil(absl::Now() + absl::Seconds(30), "the download"));
    return host;
  }

  absl::Status Expect(const at::Tensor& tensor, const at::Tensor& expected,
                      const std::string& what) {
    ASSIGN_OR_RETURN(at::Tensor got, Download(tensor));
    return Check(at::equal(got, expected),
                 absl::StrCat(what, ": the device tensor differs from the local reference"));
  }
};

absl::StatusOr<std::unique_ptr<Rank>> Join(std::unique_ptr<TensorDevice> device = nullptr,
                                           absl::Duration timeout = absl::Seconds(60)) {
  ASSIGN_OR_RETURN(rdma::torch::TcpStoreOptions options,
                   rdma::torch::TcpStoreOptions::FromEnvironment());
  auto rank = std::make_unique<Rank>();
  rank->rank = options.rank;
  rank->world = options.world_size;
  ASSIGN_OR_RETURN(rank->store, rdma::torch::TcpStore::Create(options));
  // Every rank is up before the group starts (3 s timeout in one case).
  RETURN_IF_ERROR(AllRanksUp(*rank->store->store(), rank->rank, rank->world));
  ASSIGN_OR_RETURN(torch_backend::BackendOptions backend,
                   torch_backend::BackendOptions::FromEnvironment(timeout));
  if (const char* off = std::getenv("RDMAFLOW_TEST_P2P_OFF_ON_RANK");
      off != nullptr && std::string(off) == std::to_string(rank->rank)) {
    backend.device_p2p = false;
  }
  if (OnCuda()) {
    // The group takes torch's current CUDA device itself.
    RETURN_IF_ERROR(LoadTorchCuda());
    backend.device = "cuda";
    ASSIGN_OR_RETURN(rank->pg, ProcessGroupRdmaflow::Create(rank->store->store(), rank->rank,
                                                            rank->world, backend));
    rank->device = rank->pg->device();
    if (rank->device == nullptr) return absl::InternalError("the group took no CUDA device");
    return rank;
  }
  if (device == nullptr) {
    device::FakeDeviceOptions fake;
    fake.operation_delay = kOperationDelay;
    fake.ipc_export_limit_bytes = kIpcExportLimit;
    // Those allocations come in pieces too, as expandable segments do.
    fake.query_piece_bytes = kIpcExportLimit;
    ASSIGN_OR_RETURN(device, TensorDevice::Fake(fake));
  }
  ASSIGN_OR_RETURN(rank->pg, ProcessGroupRdmaflow::Create(rank->store->store(), rank->rank,
                                                          rank->world, backend,
                                                          std::move(device)));
  rank->device = rank->pg->device();
  if (rank->device == nullptr) return absl::InternalError("the group has no device");
  ASSIGN_OR_RETURN(rank->stream, rank->device->runtime().CreateStream());
  torch_backend::SetFakeCurrentStream(rank->stream.get());
  return rank;
}

// Whether the test runs the group with direct access off (the rings; the
// device broadcasts then sum rather than copy).
bool DirectOff() {
  const char* direct = std::getenv("RDMAFLOW_DIRECT");
  return direct != nullptr && std::string(direct) == "off";
}

// Between two snapshots of the stats: `on_device` calls counted in
// `field` and no byte staged, or (`staged`) no such call and some bytes
// staged through host memory.
absl::Status CheckPath(const torch_backend::BackendStats& before,
                       const torch_backend::BackendStats& after,
                       int64_t torch_backend::BackendStats::*field, bool staged,
                       int64_t on_device, const std::string& what) {
  const int64_t calls = after.*field - before.*field;
  const int64_t bytes = after.device_staged_bytes - before.device_staged_bytes;
  return Check(staged ? calls == 0 && bytes > 0 : calls == on_device && bytes == 0,
               absl::StrCat(what, ": ", calls, " on the device, ", bytes, " bytes staged"));
}

absl::Status AllReduces(Rank& r) {
  for (at::ScalarType dtype : {at::kFloat, at::kDouble, at::kLong}) {
    // Past the device all-reduce's 1 MiB region too (in pieces).
    for (int64_t n : {int64_t{1}, int64_t{65537}, int64_t{1} << 19}) {
      if (n > 65537 && dtype != at::kFloat) continue;
      at::Tensor reference = Values(0, n, dtype);
      for (int q = 1; q < r.world; ++q) reference += Values(q, n, dtype);
      ASSIGN_OR_RETURN(at::Tensor tensor, r.Upload(Values(r.rank, n, dtype)));
      std::vector<at::Tensor> tensors = {tensor};
      c10::intrusive_ptr<c10d::Work> work = r.pg->allreduce(tensors);
      RETURN_IF_ERROR(Wait(work));
      const std::string what = absl::StrCat("allreduce ", c10::toString(dtype), " x", n);
      RETURN_IF_ERROR(r.Expect(tensor, reference, what));
      // The Future holds the caller's tensor, not the host twin.
      const std::vector<at::Tensor> value = work->getFuture()->value().toTensorVector();
      RETURN_IF_ERROR(Check(value.size() == 1 && value[0].data_ptr() == tensor.data_ptr(),
                            absl::StrCat(what, ": the Future's tensor is not the caller's")));
    }
  }
  // Two device tensors coalesced, and an asynchronous call waited for later.
  ASSIGN_OR_RETURN(at::Tensor a, r.Upload(Values(r.rank, 1000, at::kFloat, 1)));
  ASSIGN_OR_RETURN(at::Tensor b, r.Upload(Values(r.rank, 3000, at::kFloat, 2)));
  std::vector<at::Tensor> both = {a, b};
  {
    // On the device, through one flat tensor: nothing staged.
    const torch_backend::BackendStats before = r.pg->stats();
    RETURN_IF_ERROR(Wait(r.pg->allreduce_coalesced(both)));
    RETURN_IF_ERROR(CheckPath(before, r.pg->stats(),
                              &torch_backend::BackendStats::device_allreduces,
                              /*staged=*/false, 1, "allreduce_coalesced"));
  }
  at::Tensor ra = Values(0, 1000, at::kFloat, 1);
  at::Tensor rb = Values(0, 3000, at::kFloat, 2);
  for (int q = 1; q < r.world; ++q) {
    ra += Values(q, 1000, at::kFloat, 1);
    rb += Values(q, 3000, at::kFloat, 2);
  }
  RETURN_IF_ERROR(r.Expect(a, ra, "allreduce_coalesced (first)"));
  RETURN_IF_ERROR(r.Expect(b, rb, "allreduce_coalesced (second)"));
  // A synchronous all-reduce (torch's async_op=False, which may run on the
  // caller's thread) of a float tensor, which the device reduces.
  {
    ASSIGN_OR_RETURN(at::Tensor x, r.Upload(Values(r.rank, 3000, at::kFloat, 8)));
    std::vector<at::Tensor> xs = {x};
    c10d::AllreduceOptions sync;
    sync.asyncOp = false;
    RETURN_IF_ERROR(Wait(r.pg->allreduce(xs, sync)));
    at::Tensor sum = Values(0, 3000, at::kFloat, 8);
    for (int q = 1; q < r.world; ++q) sum += Values(q, 3000, at::kFloat, 8);
    RETURN_IF_ERROR(r.Expect(x, sum, "a synchronous all-reduce on the device"));
  }
  // An asynchronous all-reduce, then at once a synchronous broadcast of the
  // same tensor (which may run on this thread): the broadcast must see the
  // all-reduce's result, copied back before it reads.
  for (at::ScalarType dtype : {at::kDouble, at::kFloat}) {
    ASSIGN_OR_RETURN(at::Tensor x, r.Upload(Values(r.rank, 5000, dtype, 7)));
    std::vector<at::Tensor> xs = {x};
    c10::intrusive_ptr<c10d::Work> first = r.pg->allreduce(xs);
    c10d::BroadcastOptions sync;
    sync.rootRank = 0;
    sync.asyncOp = false;
    RETURN_IF_ERROR(Wait(r.pg->broadcast(xs, sync)));
    RETURN_IF_ERROR(Wait(first));
    at::Tensor sum = Values(0, 5000, dtype, 7);
    for (int q = 1; q < r.world; ++q) sum += Values(q, 5000, dtype, 7);
    RETURN_IF_ERROR(r.Expect(x, sum, absl::StrCat("a broadcast right after an all-reduce (",
                                                  c10::toString(dtype), ")")));
  }
  return absl::OkStatus();
}

// Whether the test turned device to device sends off on one rank
// (RDMAFLOW_DEVICE_P2P=off there, said to every rank by the next variable).
bool P2pOffSomewhere() {
  const char* off = std::getenv("RDMAFLOW_TEST_P2P_OFF_ON_RANK");
  return off != nullptr;
}

absl::Status OtherCollectives(Rank& r) {
  const int64_t n = 4099;
  for (int root = 0; root < r.world; ++root) {
    ASSIGN_OR_RETURN(at::Tensor tensor, r.Upload(Values(r.rank, n, at::kFloat, root)));
    std::vector<at::Tensor> tensors = {tensor};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    RETURN_IF_ERROR(Wait(r.pg->broadcast(tensors, opts)));
    RETURN_IF_ERROR(
        r.Expect(tensor, Values(root, n, at::kFloat, root), absl::StrCat("broadcast from ", root)));
  }
  // int64 (BatchNorm's num_batches_tracked, which DDP broadcasts every
  // step), extremes included: copied on the device with every rank on one
  // host, nothing staged; through host memory with direct access off.
  for (int root = 0; root < r.world; ++root) {
    auto longs = [&](int q) {
      at::Tensor v = Values(q, n, at::kLong, root);
      v[0] = std::numeric_limits<int64_t>::min() + q;
      v[1] = std::numeric_limits<int64_t>::max() - q;
      v[2] = -1;
      return v;
    };
    ASSIGN_OR_RETURN(at::Tensor tensor, r.Upload(longs(r.rank)));
    std::vector<at::Tensor> tensors = {tensor};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    const torch_backend::BackendStats before = r.pg->stats();
    RETURN_IF_ERROR(Wait(r.pg->broadcast(tensors, opts)));
    const torch_backend::BackendStats after = r.pg->stats();
    RETURN_IF_ERROR(r.Expect(tensor, longs(root), absl::StrCat("int64 broadcast from ", root)));
    const int64_t staged = after.device_staged_bytes - before.device_staged_bytes;
    const int64_t on_device = after.device_broadcasts - before.device_broadcasts;
    RETURN_IF_ERROR(Check(DirectOff() ? staged > 0 && on_device == 0
                                      : staged == 0 && on_device == 1,
                          absl::StrCat("int64 broadcast from ", root, ": ", staged,
                                       " bytes staged, ", on_device, " on the device")));
  }
  // Ranks whose broadcasts differ in size (rank 0's past the 1 MiB staging
  // part, two pieces; the others' one) all fail at once, naming the call,
  // and the group goes on. With direct access off it would be the ring's
  // mismatch, after which the ring is unusable: not tried there.
  if (!DirectOff()) {
    const int64_t n = r.rank == 0 ? 393216 : 262144;  // 1.5 MiB and 1 MiB of float32
    ASSIGN_OR_RETURN(at::Tensor tensor, r.Upload(Values(r.rank, n, at::kFloat, 2)));
    std::vector<at::Tensor> tensors = {tensor};
    c10d::BroadcastOptions opts;
    opts.rootRank = 0;
    absl::Status status = Wait(r.pg->broadcast(tensors, opts));
    // Each side named as the broadcast it is, the last piece's mark too.
    RETURN_IF_ERROR(Check(!status.ok() && absl::StrContains(status.message(), "Broadcast(") &&
                              absl::StrContains(status.message(), "variant 2") &&
                              !absl::StrContains(status.message(), "unknown call"),
                          absl::StrCat("broadcasts of different sizes: ", status.ToString())));
    ASSIGN_OR_RETURN(at::Tensor again, r.Upload(Values(r.rank, 4099, at::kFloat, 2)));
    std::vector<at::Tensor> agains = {again};
    RETURN_IF_ERROR(Wait(r.pg->broadcast(agains, opts)));
    RETURN_IF_ERROR(r.Expect(again, Values(0, 4099, at::kFloat, 2),
                             "a broadcast after broadcasts of different sizes"));
  }
  // all-gather into device outputs, and into host outputs.
  for (bool device_outputs : {true, false}) {
    ASSIGN_OR_RETURN(at::Tensor input, r.Upload(Values(r.rank, n, at::kDouble)));
    std::vector<at::Tensor> inputs = {input};
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int q = 0; q < r.world; ++q) {
      if (device_outputs) {
        ASSIGN_OR_RETURN(at::Tensor out, r.Empty({n}, at::kDouble));
        outputs[0].push_back(out);
      } else {
        outputs[0].push_back(at::zeros({n}, at::kDouble));
      }
    }
    RETURN_IF_ERROR(Wait(r.pg->allgather(outputs, inputs)));
    for (int q = 0; q < r.world; ++q) {
      const std::string what = absl::StrCat("allgather part ", q,
                                            device_outputs ? " (device)" : " (host)");
      if (device_outputs) {
        RETURN_IF_ERROR(r.Expect(outputs[0][q], Values(q, n, at::kDouble), what));
      } else {
        RETURN_IF_ERROR(Check(at::equal(outputs[0][q], Values(q, n, at::kDouble)), what));
      }
    }
  }
  // The flat forms FSDP uses.
  {
    ASSIGN_OR_RETURN(at::Tensor input, r.Upload(Values(r.rank, n, at::kFloat, 3)));
    ASSIGN_OR_RETURN(at::Tensor output, r.Empty({n * r.world}, at::kFloat));
    RETURN_IF_ERROR(Wait(r.pg->_allgather_base(output, input)));
    std::vector<at::Tensor> parts;
    for (int q = 0; q < r.world; ++q) parts.push_back(Values(q, n, at::kFloat, 3));
    RETURN_IF_ERROR(r.Expect(output, at::cat(parts), "_allgather_base"));
  }
  {
    ASSIGN_OR_RETURN(at::Tensor input, r.Upload(Values(r.rank, n * r.world, at::kFloat, 4)));
    ASSIGN_OR_RETURN(at::Tensor output, r.Empty({n}, at::kFloat));
    RETURN_IF_ERROR(Wait(r.pg->_reduce_scatter_base(output, input)));
    at::Tensor sum = Values(0, n * r.world, at::kFloat, 4);
    for (int q = 1; q < r.world; ++q) sum += Values(q, n * r.world, at::kFloat, 4);
    RETURN_IF_ERROR(r.Expect(output, sum.slice(0, r.rank * n, (r.rank + 1) * n),
                             "_reduce_scatter_base"));
    // The average FSDP asks for, over several pieces of the region.
    ASSIGN_OR_RETURN(at::Tensor big, r.Upload(Values(r.rank, 300000 * r.world, at::kFloat, 7)));
    ASSIGN_OR_RETURN(at::Tensor mean, r.Empty({300000}, at::kFloat));
    c10d::ReduceScatterOptions average;
    average.reduceOp = c10d::ReduceOp::AVG;
    RETURN_IF_ERROR(Wait(r.pg->_reduce_scatter_base(mean, big, average)));
    at::Tensor total = Values(0, 300000 * r.world, at::kFloat, 7);
    for (int q = 1; q < r.world; ++q) total += Values(q, 300000 * r.world, at::kFloat, 7);
    RETURN_IF_ERROR(r.Expect(
        mean, total.slice(0, r.rank * 300000, (r.rank + 1) * 300000).div(r.world),
        "_reduce_scatter_base (average, in pieces)"));
    // In place: the output is this rank's part of the input, and then the
    // next rank's part (read after it is written, unless copied first).
    for (const int at_part : {r.rank, (r.rank + 1) % r.world}) {
      ASSIGN_OR_RETURN(at::Tensor both, r.Upload(Values(r.rank, 300000 * r.world, at::kFloat, 7)));
      at::Tensor into = both.narrow(0, at_part * 300000, 300000);
      RETURN_IF_ERROR(Wait(r.pg->_reduce_scatter_base(into, both)));
      RETURN_IF_ERROR(r.Expect(into, total.slice(0, r.rank * 300000, (r.rank + 1) * 300000),
                               absl::StrCat("_reduce_scatter_base into part ", at_part,
                                            " of its input")));
    }
  }
  {
    // The device all-gather sums -0.0 into every other rank's part: each
    // part comes back bit for bit, -0.0, infinities, NaN and a subnormal
    // too.
    const float specials[] = {-0.0f, 0.0f, std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN(), 1e-40f,
                              static_cast<float>(r.rank) + 0.5f};
    const int64_t k = sizeof(specials) / sizeof(specials[0]);
    auto part = [&](int q) {
      at::Tensor t = at::from_blob(const_cast<float*>(specials), {k}, at::kFloat).clone();
      t[k - 1] = static_cast<float>(q) + 0.5f;
      return t;
    };
    ASSIGN_OR_RETURN(at::Tensor input, r.Upload(part(r.rank)));
    ASSIGN_OR_RETURN(at::Tensor output, r.Empty({k * r.world}, at::kFloat));
    RETURN_IF_ERROR(Wait(r.pg->_allgather_base(output, input)));
    std::vector<at::Tensor> parts;
    for (int q = 0; q < r.world; ++q) parts.push_back(part(q));
    ASSIGN_OR_RETURN(at::Tensor got, r.Download(output));
    RETURN_IF_ERROR(Check(at::equal(got.view(at::kInt), at::cat(parts).view(at::kInt)),
                          "_allgather_base of -0.0, infinities, NaN and a subnormal: not bit for "
                          "bit"));
    // In place, as FSDP2 calls it: the input is this rank's part of the
    // output; the other parts hold what must be overwritten.
    at::Tensor before = at::full({k * r.world}, 99.0f);
    before.narrow(0, r.rank * k, k).copy_(part(r.rank));
    ASSIGN_OR_RETURN(at::Tensor gathered, r.Upload(before));
    at::Tensor mine = gathered.narrow(0, r.rank * k, k);
    RETURN_IF_ERROR(Wait(r.pg->_allgather_base(gathered, mine)));
    ASSIGN_OR_RETURN(at::Tensor in_place, r.Download(gathered));
    RETURN_IF_ERROR(Check(at::equal(in_place.view(at::kInt), at::cat(parts).view(at::kInt)),
                          "_allgather_base in place (the input a part of the output)"));
    // A broadcast on the device copies the root's bytes (one host) or sums
    // the others' -0.0 into its values (direct access off): either way
    // they come back bit for bit, on every rank.
    for (int root = 0; root < r.world; ++root) {
      ASSIGN_OR_RETURN(at::Tensor tensor, r.Upload(part(r.rank)));
      std::vector<at::Tensor> tensors = {tensor};
      c10d::BroadcastOptions opts;
      opts.rootRank = root;
      RETURN_IF_ERROR(Wait(r.pg->broadcast(tensors, opts)));
      ASSIGN_OR_RETURN(at::Tensor got_root, r.Download(tensor));
      RETURN_IF_ERROR(Check(at::equal(got_root.view(at::kInt), part(root).view(at::kInt)),
                            absl::StrCat("broadcast from ", root,
                                         " of -0.0, infinities, NaN and a subnormal: not bit "
                                         "for bit")));
    }
  }
  {
    // Rank q sends rows [q * 3, q * 3 + 3) of its input to each rank.
    ASSIGN_OR_RETURN(at::Tensor input, r.Upload(Values(r.rank, 3 * r.world * 5, at::kLong)
                                                    .reshape({3 * r.world, 5})));
    ASSIGN_OR_RETURN(at::Tensor output, r.Empty({3 * r.world, 5}, at::kLong));
    std::vector<int64_t> splits;
    const torch_backend::BackendStats before = r.pg->stats();
    RETURN_IF_ERROR(Wait(r.pg->alltoall_base(output, input, splits, splits)));
    const torch_backend::BackendStats after = r.pg->stats();
    std::vector<at::Tensor> parts;
    for (int q = 0; q < r.world; ++q) {
      parts.push_back(Values(q, 3 * r.world * 5, at::kLong)
                          .reshape({3 * r.world, 5})
                          .slice(0, r.rank * 3, r.rank * 3 + 3));
    }
    RETURN_IF_ERROR(r.Expect(output, at::cat(parts), "alltoall_base"));
    // Device to device with every rank on one host: nothing staged.
    RETURN_IF_ERROR(CheckPath(before, after, &torch_backend::BackendStats::device_alltoalls,
                              DirectOff(), 1, "alltoall_base"));
  }
  {
    // Uneven parts, an empty one among them: rank q sends q + p rows to
    // rank p (none from rank 0 to rank 0), float32 rows of 3.
    auto rows_to = [](int q, int p) { return static_cast<int64_t>(q + p); };
    std::vector<int64_t> in_splits, out_splits;
    int64_t in_rows = 0, out_rows = 0;
    for (int p = 0; p < r.world; ++p) {
      in_splits.push_back(rows_to(r.rank, p));
      out_splits.push_back(rows_to(p, r.rank));
      in_rows += in_splits.back();
      out_rows += out_splits.back();
    }
    // Rank q's input: its rows for rank 0, then 1, ...: row values name
    // (q, p, row).
    auto input_of = [&](int q) {
      std::vector<at::Tensor> rows;
      for (int p = 0; p < r.world; ++p) {
        const int64_t k = rows_to(q, p);
        rows.push_back(at::arange(k * 3, at::kFloat).reshape({k, 3}) + 1000 * q + 100 * p);
      }
      return at::cat(rows);
    };
    ASSIGN_OR_RETURN(at::Tensor input, r.Upload(input_of(r.rank)));
    ASSIGN_OR_RETURN(at::Tensor output, r.Empty({out_rows, 3}, at::kFloat));
    RETURN_IF_ERROR(Wait(r.pg->alltoall_base(output, input, out_splits, in_splits)));
    std::vector<at::Tensor> expected;
    for (int q = 0; q < r.world; ++q) {
      int64_t first = 0;
      for (int p = 0; p < r.rank; ++p) first += rows_to(q, p);
      expected.push_back(input_of(q).narrow(0, first, rows_to(q, r.rank)));
    }
    RETURN_IF_ERROR(r.Expect(output, at::cat(expected), "alltoall_base with uneven parts"));
    // The list form.
    std::vector<at::Tensor> ins, outs;
    for (int p = 0; p < r.world; ++p) {
      ASSIGN_OR_RETURN(at::Tensor in, r.Upload(Values(r.rank * 10 + p, 257, at::kFloat, 3)));
      ins.push_back(in);
      ASSIGN_OR_RETURN(at::Tensor out, r.Empty({257}, at::kFloat));
      outs.push_back(out);
    }
    RETURN_IF_ERROR(Wait(r.pg->alltoall(outs, ins)));
    for (int q = 0; q < r.world; ++q) {
      RETURN_IF_ERROR(r.Expect(outs[q], Values(q * 10 + r.rank, 257, at::kFloat, 3),
                               absl::StrCat("alltoall, the part from rank ", q)));
    }
  }
  {
    // gather and scatter at root 0.
    ASSIGN_OR_RETURN(at::Tensor input, r.Upload(Values(r.rank, n, at::kFloat, 5)));
    std::vector<at::Tensor> inputs = {input};
    std::vector<std::vector<at::Tensor>> outputs;
    if (r.rank == 0) {
      outputs.emplace_back();
      for (int q = 0; q < r.world; ++q) {
        ASSIGN_OR_RETURN(at::Tensor out, r.Empty({n}, at::kFloat));
        outputs[0].push_back(out);
      }
    }
    const torch_backend::BackendStats before = r.pg->stats();
    RETURN_IF_ERROR(Wait(r.pg->gather(outputs, inputs)));
    for (int q = 0; r.rank == 0 && q < r.world; ++q) {
      RETURN_IF_ERROR(r.Expect(outputs[0][q], Values(q, n, at::kFloat, 5),
                               absl::StrCat("gather part ", q)));
    }
    const torch_backend::BackendStats gathered = r.pg->stats();
    RETURN_IF_ERROR(CheckPath(before, gathered, &torch_backend::BackendStats::device_gathers,
                              DirectOff(), 1, "gather"));
    ASSIGN_OR_RETURN(at::Tensor received, r.Empty({n}, at::kFloat));
    std::vector<at::Tensor> scattered = {received};
    std::vector<std::vector<at::Tensor>> sources;
    if (r.rank == 0) {
      sources.emplace_back();
      for (int q = 0; q < r.world; ++q) {
        ASSIGN_OR_RETURN(at::Tensor part, r.Upload(Values(q, n, at::kFloat, 6)));
        sources[0].push_back(part);
      }
    }
    RETURN_IF_ERROR(Wait(r.pg->scatter(scattered, sources)));
    RETURN_IF_ERROR(r.Expect(received, Values(r.rank, n, at::kFloat, 6), "scatter"));
    RETURN_IF_ERROR(CheckPath(gathered, r.pg->stats(),
                              &torch_backend::BackendStats::device_scatters, DirectOff(), 1,
                              "scatter"));
    // Rooted at the last rank, the root's input one of its outputs: its
    // own part stays as it is.
    const int root = r.world - 1;
    ASSIGN_OR_RETURN(at::Tensor mine, r.Upload(Values(r.rank, n, at::kFloat, 9)));
    std::vector<at::Tensor> mines = {mine};
    std::vector<std::vector<at::Tensor>> into;
    if (r.rank == root) {
      into.emplace_back();
      for (int q = 0; q < r.world; ++q) {
        if (q == root) {
          into[0].push_back(mine);
          continue;
        }
        ASSIGN_OR_RETURN(at::Tensor out, r.Empty({n}, at::kFloat));
        into[0].push_back(out);
      }
    }
    c10d::GatherOptions at_last;
    at_last.rootRank = root;
    RETURN_IF_ERROR(Wait(r.pg->gather(into, mines, at_last)));
    for (int q = 0; r.rank == root && q < r.world; ++q) {
      RETURN_IF_ERROR(r.Expect(into[0][q], Values(q, n, at::kFloat, 9),
                               absl::StrCat("gather at the last rank, part ", q)));
    }
  }
  return absl::OkStatus();
}

// The list forms of all-gather and reduce-scatter, reduce, and averages,
// on the device: through a flat device tensor, nothing staged, counted as
// the device calls they are; a list with one host tensor in it staged.
absl::Status ListFormsOnTheDevice(Rank& r) {
  const int64_t n = 70001;  // the parts lie across the region's 1 MiB pieces
  {
    // all-gather, bit for bit: -0.0, infinities, NaN and a subnormal in
    // every part.
    auto part = [&](int q) {
      at::Tensor t = Values(q, n, at::kFloat, 9);
      t[0] = -0.0f;
      t[1] = std::numeric_limits<float>::infinity();
      t[2] = std::numeric_limits<float>::quiet_NaN();
      t[n - 1] = 1e-40f;
      return t;
    };
    ASSIGN_OR_RETURN(at::Tensor input, r.Upload(part(r.rank)));
    std::vector<at::Tensor> inputs = {input};
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int q = 0; q < r.world; ++q) {
      ASSIGN_OR_RETURN(at::Tensor out, r.Empty({n}, at::kFloat));
      outputs[0].push_back(out);
    }
    const torch_backend::BackendStats before = r.pg->stats();
    RETURN_IF_ERROR(Wait(r.pg->allgather(outputs, inputs)));
    RETURN_IF_ERROR(CheckPath(before, r.pg->stats(),
                              &torch_backend::BackendStats::device_allgathers,
                              /*staged=*/false, 1, "allgather into device outputs"));
    for (int q = 0; q < r.world; ++q) {
      ASSIGN_OR_RETURN(at::Tensor got, r.Download(outputs[0][q]));
      RETURN_IF_ERROR(Check(at::equal(got.view(at::kInt), part(q).view(at::kInt)),
                            absl::StrCat("allgather on the device, part ", q,
                                         ": not bit for bit")));
    }
    // This rank's output is its input: gathered all the same.
    ASSIGN_OR_RETURN(at::Tensor own, r.Upload(part(r.rank)));
    std::vector<at::Tensor> own_input = {own};
    outputs[0][r.rank] = own;
    RETURN_IF_ERROR(Wait(r.pg->allgather(outputs, own_input)));
    for (int q = 0; q < r.world; ++q) {
      ASSIGN_OR_RETURN(at::Tensor got, r.Download(outputs[0][q]));
      RETURN_IF_ERROR(Check(at::equal(got.view(at::kInt), part(q).view(at::kInt)),
                            absl::StrCat("allgather with its input as an output, part ", q)));
    }
    // One host output in the list: staged, and still right.
    outputs[0][r.world - 1] = at::zeros({n}, at::kFloat);
    const torch_backend::BackendStats mixed_before = r.pg->stats();
    RETURN_IF_ERROR(Wait(r.pg->allgather(outputs, inputs)));
    RETURN_IF_ERROR(CheckPath(mixed_before, r.pg->stats(),
                              &torch_backend::BackendStats::device_allgathers,
                              /*staged=*/true, 0, "allgather with a host output"));
    RETURN_IF_ERROR(Check(at::equal(outputs[0][r.world - 1].view(at::kInt),
                                    part(r.world - 1).view(at::kInt)),
                          "allgather with a host output: the host part"));
  }
  // reduce-scatter of a list, by each operator the device takes.
  for (const c10d::ReduceOp::RedOpType op :
       {c10d::ReduceOp::SUM, c10d::ReduceOp::AVG, c10d::ReduceOp::MAX}) {
    std::vector<std::vector<at::Tensor>> inputs(1);
    for (int q = 0; q < r.world; ++q) {
      ASSIGN_OR_RETURN(at::Tensor in, r.Upload(Values(r.rank, n, at::kFloat, 10 + q)));
      inputs[0].push_back(in);
    }
    ASSIGN_OR_RETURN(at::Tensor output, r.Empty({n}, at::kFloat));
    std::vector<at::Tensor> outputs = {output};
    c10d::ReduceScatterOptions opts;
    opts.reduceOp = op;
    const torch_backend::BackendStats before = r.pg->stats();
    RETURN_IF_ERROR(Wait(r.pg->reduce_scatter(outputs, inputs, opts)));
    const std::string what = absl::StrCat("reduce_scatter (op ", static_cast<int>(op), ")");
    RETURN_IF_ERROR(CheckPath(before, r.pg->stats(),
                              &torch_backend::BackendStats::device_reduce_scatters,
                              /*staged=*/false, 1, what));
    at::Tensor expected = Values(0, n, at::kFloat, 10 + r.rank);
    for (int q = 1; q < r.world; ++q) {
      const at::Tensor v = Values(q, n, at::kFloat, 10 + r.rank);
      expected = op == c10d::ReduceOp::MAX ? at::maximum(expected, v) : expected + v;
    }
    if (op == c10d::ReduceOp::AVG) expected = expected.div(r.world);
    RETURN_IF_ERROR(r.Expect(output, expected, what));
    // Its inputs are left as they were.
    RETURN_IF_ERROR(r.Expect(inputs[0][r.world - 1], Values(r.rank, n, at::kFloat, 10 + r.world - 1),
                             what + ": an input"));
  }
  // An averaging all-reduce, and a reduce to each root by sum and average.
  {
    ASSIGN_OR_RETURN(at::Tensor tensor, r.Upload(Values(r.rank, n, at::kFloat, 11)));
    std::vector<at::Tensor> tensors = {tensor};
    c10d::AllreduceOptions average;
    average.reduceOp = c10d::ReduceOp::AVG;
    const torch_backend::BackendStats before = r.pg->stats();
    RETURN_IF_ERROR(Wait(r.pg->allreduce(tensors, average)));
    RETURN_IF_ERROR(CheckPath(before, r.pg->stats(),
                              &torch_backend::BackendStats::device_allreduces,
                              /*staged=*/false, 1, "allreduce AVG"));
    at::Tensor sum = Values(0, n, at::kFloat, 11);
    for (int q = 1; q < r.world; ++q) sum += Values(q, n, at::kFloat, 11);
    RETURN_IF_ERROR(r.Expect(tensor, sum.div(r.world), "allreduce AVG"));
  }
  for (int root = 0; root < r.world; ++root) {
    for (const c10d::ReduceOp::RedOpType op : {c10d::ReduceOp::SUM, c10d::ReduceOp::AVG}) {
      ASSIGN_OR_RETURN(at::Tensor tensor, r.Upload(Values(r.rank, n, at::kFloat, root)));
      std::vector<at::Tensor> tensors = {tensor};
      c10d::ReduceOptions opts;
      opts.rootRank = root;
      opts.reduceOp = op;
      const torch_backend::BackendStats before = r.pg->stats();
      RETURN_IF_ERROR(Wait(r.pg->reduce(tensors, opts)));
      const std::string what =
          absl::StrCat("reduce to ", root, " (op ", static_cast<int>(op), ")");
      RETURN_IF_ERROR(CheckPath(before, r.pg->stats(),
                                &torch_backend::BackendStats::device_allreduces,
                                /*staged=*/false, 1, what));
      at::Tensor expected = Values(r.rank, n, at::kFloat, root);
      if (r.rank == root) {
        expected = Values(0, n, at::kFloat, root);
        for (int q = 1; q < r.world; ++q) expected += Values(q, n, at::kFloat, root);
        if (op == c10d::ReduceOp::AVG) expected = expected.div(r.world);
      }
      RETURN_IF_ERROR(r.Expect(tensor, expected, what));
    }
  }
  return absl::OkStatus();
}

// Sends and receives of device tensors: device to device with every rank
// on one host (through IPC, or inline in the message where the sender's
// memory does not export: past kIpcExportLimit), else through host memory.
absl::Status PointToPoint(Rank& r) {
  const int peer = r.rank ^ 1;
  if (peer >= r.world) return absl::OkStatus();
  const torch_backend::BackendStats before = r.pg->stats();
  for (int round = 0; round < 3; ++round) {
    const int64_t n = 1000 + 70000 * round;  // past one message slot too
    ASSIGN_OR_RETURN(at::Tensor in, r.Empty({n}, at::kFloat));
    std::vector<at::Tensor> ins = {in};
    c10::intrusive_ptr<c10d::Work> received = r.pg->recv(ins, peer, round);
    ASSIGN_OR_RETURN(at::Tensor out, r.Upload(Values(r.rank, n, at::kFloat, round)));
    std::vector<at::Tensor> outs = {out};
    RETURN_IF_ERROR(Wait(r.pg->send(outs, peer, round)));
    RETURN_IF_ERROR(Wait(received));
    RETURN_IF_ERROR(r.Expect(in, Values(peer, n, at::kFloat, round),
                             absl::StrCat("recv round ", round)));
  }
  // Three of one tag in flight at once, int64, each sent from inside a
  // larger tensor (its offset in the allocation) and received in order.
  {
    const int64_t n = 3001;
    std::vector<c10::intrusive_ptr<c10d::Work>> receives;
    std::vector<at::Tensor> targets;
    for (int k = 0; k < 3; ++k) {
      ASSIGN_OR_RETURN(at::Tensor in, r.Empty({n}, at::kLong));
      targets.push_back(in);
      std::vector<at::Tensor> ins = {in};
      receives.push_back(r.pg->recv(ins, peer, 7));
    }
    ASSIGN_OR_RETURN(at::Tensor whole, r.Upload(Values(r.rank, 3 * n + 5, at::kLong, 7)));
    std::vector<c10::intrusive_ptr<c10d::Work>> sends;
    for (int k = 0; k < 3; ++k) {
      std::vector<at::Tensor> outs = {whole.narrow(0, 5 + k * n, n)};
      sends.push_back(r.pg->send(outs, peer, 7));
    }
    for (auto& work : sends) RETURN_IF_ERROR(Wait(work));
    for (int k = 0; k < 3; ++k) {
      RETURN_IF_ERROR(Wait(receives[k]));
      RETURN_IF_ERROR(r.Expect(targets[k],
                               Values(peer, 3 * n + 5, at::kLong, 7).narrow(0, 5 + k * n, n),
                               absl::StrCat("receive ", k, " of three in flight on one tag")));
    }
  }
  const torch_backend::BackendStats middle = r.pg->stats();
  // Off where direct access is, or where one rank turned it off (rank 1
  // there: every rank stages).
  RETURN_IF_ERROR(CheckPath(before, middle, &torch_backend::BackendStats::device_p2p_ipc,
                            DirectOff() || P2pOffSomewhere(), 12,
                            "sends and receives of device tensors"));
  if (DirectOff() || P2pOffSomewhere()) return absl::OkStatus();
  // Tensors from ten more allocations: the peer keeps 8 of this rank's
  // allocations mapped (kMappingsPerPeer), and this rank pins one tensor
  // per allocation it maps, no more (the answers name what it closed).
  {
    const int64_t pinned_before = r.pg->stats().device_p2p_pinned;
    for (int k = 0; k < 10; ++k) {
      ASSIGN_OR_RETURN(at::Tensor in, r.Empty({256}, at::kFloat));
      std::vector<at::Tensor> ins = {in};
      c10::intrusive_ptr<c10d::Work> received = r.pg->recv(ins, peer, 9);
      ASSIGN_OR_RETURN(at::Tensor out, r.Upload(Values(r.rank, 256, at::kFloat, k)));
      std::vector<at::Tensor> outs = {out};
      RETURN_IF_ERROR(Wait(r.pg->send(outs, peer, 9)));
      RETURN_IF_ERROR(Wait(received));
      RETURN_IF_ERROR(r.Expect(in, Values(peer, 256, at::kFloat, k),
                               absl::StrCat("receive ", k, " from a new allocation")));
    }
    const int64_t pinned = r.pg->stats().device_p2p_pinned;
    const int64_t most = static_cast<int64_t>(torch_backend::DeviceP2p::kMappingsPerPeer);
    RETURN_IF_ERROR(Check(r.world == 2 ? pinned == most
                                       : pinned > 0 && pinned - pinned_before <= most &&
                                             pinned <= most * (r.world - 1),
                          absl::StrCat(pinned, " tensors pinned for the peers' mappings (",
                                       pinned_before, " before ten new allocations)")));
  }
  if (OnCuda()) return absl::OkStatus();
  const torch_backend::BackendStats before_inline = r.pg->stats();
  // Memory that does not export (as expandable segments'): the bytes go
  // inline in the message, counted.
  const int64_t n = kIpcExportLimit / 4 + 1000;
  ASSIGN_OR_RETURN(at::Tensor in, r.Empty({n}, at::kFloat));
  std::vector<at::Tensor> ins = {in};
  c10::intrusive_ptr<c10d::Work> received = r.pg->recv(ins, peer, 8);
  ASSIGN_OR_RETURN(at::Tensor out, r.Upload(Values(r.rank, n, at::kFloat, 8)));
  std::vector<at::Tensor> outs = {out};
  RETURN_IF_ERROR(Wait(r.pg->send(outs, peer, 8)));
  RETURN_IF_ERROR(Wait(received));
  RETURN_IF_ERROR(r.Expect(in, Values(peer, n, at::kFloat, 8), "a receive sent inline"));
  const torch_backend::BackendStats after = r.pg->stats();
  const int64_t inlined = after.device_p2p_inline - before_inline.device_p2p_inline;
  const int64_t inline_staged = after.device_staged_bytes - before_inline.device_staged_bytes;
  return Check(inlined == 2 && inline_staged == 2 * n * 4 &&
                   after.device_p2p_ipc == before_inline.device_p2p_ipc,
               absl::StrCat("a send of memory that does not export: ", inlined, " inline, ",
                            inline_staged, " bytes staged"));
}

absl::Status Refusals(Rank& r) {
  ASSIGN_OR_RETURN(at::Tensor square, r.Upload(Values(r.rank, 64, at::kFloat).reshape({8, 8})));
  std::vector<at::Tensor> transposed = {square.t()};
  absl::Status status = Wait(r.pg->allreduce(transposed));
  RETURN_IF_ERROR(Check(absl::IsAborted(status) && absl::StrContains(status.message(), "contiguous"),
                        absl::StrCat("a non-contiguous device tensor: ", status.ToString())));
  std::vector<at::Tensor> tensors = {square};
  if (!OnCuda()) {
    torch_backend::SetFakeCurrentStream(nullptr);
    status = Wait(r.pg->allreduce(tensors));
    torch_backend::SetFakeCurrentStream(r.stream.get());
    RETURN_IF_ERROR(Check(absl::StrContains(status.message(), "no current stream"),
                          absl::StrCat("a call with no current stream: ", status.ToString())));
  }
  // Neither reached the peers: the group still works.
  RETURN_IF_ERROR(Wait(r.pg->allreduce(tensors)));
  at::Tensor sum = Values(0, 64, at::kFloat).reshape({8, 8});
  for (int q = 1; q < r.world; ++q) sum += Values(q, 64, at::kFloat).reshape({8, 8});
  return r.Expect(square, sum, "the all-reduce after the refusals");
}

// DDP's hook moves a bucket into the device pool at its second sighting
// (RegisterRepeated), once the caller's stream has written it; all-reduces
// of it then run in place there. Rank 0 moves a second, larger bucket
// (more than the 1 MiB staging part: two pieces) that the others keep
// where it is: the pieces still pair up.
absl::Status DevicePool(Rank& r) {
  for (const int64_t n : {int64_t{3001}, int64_t{300001}}) {
    const bool move = n < 300001 || r.rank == 0;
    ASSIGN_OR_RETURN(at::Tensor bucket, r.Upload(Values(r.rank, n, at::kFloat, 9)));
    if (move) {
      ASSIGN_OR_RETURN(const bool first, r.pg->RegisterRepeated(bucket));
      ASSIGN_OR_RETURN(const bool second, r.pg->RegisterRepeated(bucket));
      RETURN_IF_ERROR(Check(!first && second,
                            absl::StrCat("a ", n, "-element bucket was not moved at its "
                                         "second sighting")));
      RETURN_IF_ERROR(
          r.Expect(bucket, Values(r.rank, n, at::kFloat, 9),
                   absl::StrCat("a ", n, "-element bucket after its move (its values)")));
    }
    // A gradient view of the bucket follows its storage.
    at::Tensor view = bucket.narrow(0, 7, 100);
    at::Tensor sum = Values(0, n, at::kFloat, 9);
    for (int q = 1; q < r.world; ++q) sum += Values(q, n, at::kFloat, 9);
    for (int round = 1; round <= 2; ++round) {
      std::vector<at::Tensor> tensors = {bucket};
      const torch_backend::BackendStats before = r.pg->stats();
      RETURN_IF_ERROR(Wait(r.pg->allreduce(tensors)));
      const torch_backend::BackendStats after = r.pg->stats();
      at::Tensor expected = sum * std::pow(r.world, round - 1);
      RETURN_IF_ERROR(r.Expect(bucket, expected,
                               absl::StrCat("a ", n, "-element bucket's all-reduce ", round)));
      RETURN_IF_ERROR(r.Expect(view, expected.narrow(0, 7, 100),
                               absl::StrCat("a view of a ", n, "-element bucket")));
      const int64_t in_pool = after.device_pool_allreduces - before.device_pool_allreduces;
      RETURN_IF_ERROR(Check(in_pool == (move ? 1 : 0),
                            absl::StrCat("a ", n, "-element bucket's all-reduce ", round, ": ",
                                         in_pool, " in the pool")));
    }
  }
  // A bucket larger than the pool (2 MiB) stays where it is: refused and
  // counted, and its all-reduce still right.
  {
    const int64_t n = 700001;
    ASSIGN_OR_RETURN(at::Tensor bucket, r.Upload(Values(r.rank, n, at::kFloat, 4)));
    const int64_t refused_before = r.pg->stats().moves_refused;
    for (int sighting = 0; sighting < 2; ++sighting) {
      ASSIGN_OR_RETURN(const bool moved, r.pg->RegisterRepeated(bucket));
      RETURN_IF_ERROR(Check(!moved, "a bucket larger than the device pool was moved"));
    }
    RETURN_IF_ERROR(Check(r.pg->stats().moves_refused == refused_before + 1,
                          "a bucket larger than the device pool was not counted as refused"));
    std::vector<at::Tensor> tensors = {bucket};
    RETURN_IF_ERROR(Wait(r.pg->allreduce(tensors)));
    at::Tensor sum = Values(0, n, at::kFloat, 4);
    for (int q = 1; q < r.world; ++q) sum += Values(q, n, at::kFloat, 4);
    RETURN_IF_ERROR(r.Expect(bucket, sum, "the all-reduce of a bucket the pool refused"));
  }
  const torch_backend::BackendStats stats = r.pg->stats();
  return Check(stats.moved_to_device_pool == (r.rank == 0 ? 2 : 1),
               absl::StrCat(stats.moved_to_device_pool, " buckets moved into the device pool"));
}

absl::Status Counted(Rank& r) {
  const torch_backend::BackendStats stats = r.pg->stats();
  std::fprintf(stderr, "rank %d: %lld device calls, %lld bytes staged\n", r.rank,
               static_cast<long long>(stats.device_calls),
               static_cast<long long>(stats.device_staged_bytes));
  std::fprintf(stderr, "rank %d: %lld all-reduces on the device\n", r.rank,
               static_cast<long long>(stats.device_allreduces));
  std::fprintf(stderr,
               "rank %d: %lld all-gathers, %lld reduce-scatters and %lld broadcasts on the "
               "device\n",
               r.rank, static_cast<long long>(stats.device_allgathers),
               static_cast<long long>(stats.device_reduce_scatters),
               static_cast<long long>(stats.device_broadcasts));
  // Where the engine's time went: on the fake device (it has a stream of
  // the test's) every device all-reduce takes its delay per operation at
  // least; on a GPU some time.
  std::fprintf(stderr, "rank %d: engine us on device calls: queued %lld, waiting %lld, "
               "running %lld, copying back %lld\n", r.rank,
               static_cast<long long>(stats.device_queued_us),
               static_cast<long long>(stats.device_wait_us),
               static_cast<long long>(stats.device_run_us),
               static_cast<long long>(stats.device_back_us));
  const int64_t least_run_us =
      r.stream != nullptr ? stats.device_allreduces * absl::ToInt64Microseconds(kOperationDelay)
                          : 1;
  RETURN_IF_ERROR(Check(stats.device_run_us >= least_run_us &&
                            stats.device_wait_us > 0 && stats.device_back_us > 0,
                        "the engine's time on device calls was not counted"));
  return Check(stats.device_calls > 10 && stats.device_staged_bytes > (int64_t{1} << 20) &&
                   stats.device_allreduces >= 4 && stats.device_allgathers >= 3 &&
                   stats.device_reduce_scatters >= 4 &&
                   stats.device_broadcasts >= 2 * r.world,
               "the device calls were not counted");
}

// Rank 0's device fails its third operation: its upload is the first, the
// staging copy in the second, the copy back the third (float64: through
// host twins).
absl::Status DeviceFault() {
  ASSIGN_OR_RETURN(rdma::torch::TcpStoreOptions options,
                   rdma::torch::TcpStoreOptions::FromEnvironment());
  device::FakeDeviceOptions fake;
  fake.operation_delay = kOperationDelay;
  if (options.rank == 0) {
    fake.fail_operation = 3;
    fake.fault = absl::DataLossError("an injected ECC error");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<TensorDevice> device, TensorDevice::Fake(fake));
  ASSIGN_OR_RETURN(std::unique_ptr<Rank> r, Join(std::move(device)));
  const int64_t n = 5000;
  at::Tensor sum = Values(0, n, at::kDouble);
  for (int q = 1; q < r->world; ++q) sum += Values(q, n, at::kDouble);
  ASSIGN_OR_RETURN(at::Tensor tensor, r->Upload(Values(r->rank, n, at::kDouble)));
  std::vector<at::Tensor> tensors = {tensor};
  absl::Status status = Wait(r->pg->allreduce(tensors));
  std::fprintf(stderr, "rank %d: allreduce with a device fault: %s\n", r->rank,
               status.ToString().c_str());
  if (r->rank == 0) {
    RETURN_IF_ERROR(Check(absl::StrContains(status.message(), "injected ECC error"),
                          absl::StrCat("the faulty copy back: ", status.ToString())));
  } else {
    RETURN_IF_ERROR(status);
    RETURN_IF_ERROR(r->Expect(tensor, sum, "the peer of the faulty rank"));
  }
  // The next call copies on a new staging stream.
  ASSIGN_OR_RETURN(at::Tensor again, r->Upload(Values(r->rank, n, at::kDouble)));
  std::vector<at::Tensor> again_list = {again};
  RETURN_IF_ERROR(Wait(r->pg->allreduce(again_list)));
  return r->Expect(again, sum, "the all-reduce after the fault");
}

// The collective teardown: every step of it passes on every rank (the
// device all-reduce's included: every rank closes its mappings of the
// others' regions before any frees its own).
absl::Status ShutDown(Rank& r) {
  RETURN_IF_ERROR(Wait(r.pg->barrier()));
  r.pg->shutdown();
  const int64_t failures = r.pg->stats().teardown_failures;
  return Check(failures == 0, absl::StrCat(failures, " teardown steps failed"));
}

// A group broken by a failed collective frees none of the device memory a
// live peer may still map: the tensor it sent device to device (the peer
// keeps that allocation mapped, the sender pinned it) and its region (the
// peer mapped it for the device all-reduce; the all-reduce's own group
// keeps it too where no barrier passed). Rank 0's all-reduce times out
// (rank 1 never calls it), and rank 0 tears down while rank 1, alive,
// still maps its memory (the fake device counts a free of it); rank 1's
// teardown then finds no peer to meet.
absl::Status BeforeTheBreak(Rank& r) {
  const int64_t n = 5000;
  at::Tensor sum = Values(0, n, at::kFloat);
  for (int q = 1; q < r.world; ++q) sum += Values(q, n, at::kFloat);
  ASSIGN_OR_RETURN(at::Tensor tensor, r.Upload(Values(r.rank, n, at::kFloat)));
  std::vector<at::Tensor> tensors = {tensor};
  RETURN_IF_ERROR(Wait(r.pg->allreduce(tensors)));
  RETURN_IF_ERROR(r.Expect(tensor, sum, "the all-reduce before the group broke"));
  if (r.rank == 0) {
    // Only the pin keeps it once sent.
    ASSIGN_OR_RETURN(at::Tensor out, r.Upload(Values(0, n, at::kFloat, 3)));
    std::vector<at::Tensor> outs = {out};
    RETURN_IF_ERROR(Wait(r.pg->send(outs, 1, 0)));
    return Check(r.pg->stats().device_p2p_ipc == 1 && r.pg->stats().device_p2p_pinned == 1,
                 "the send went inline, or its tensor was not pinned");
  }
  ASSIGN_OR_RETURN(at::Tensor in, r.Empty({n}, at::kFloat));
  std::vector<at::Tensor> ins = {in};
  RETURN_IF_ERROR(Wait(r.pg->recv(ins, 0, 0)));
  return r.Expect(in, Values(0, n, at::kFloat, 3), "the send before the break");
}

// Rank 0: an all-reduce rank 1 never calls, then the teardown.
absl::Status BreakAndTearDown(Rank& r) {
  ASSIGN_OR_RETURN(at::Tensor tensor,
                   r.device->Empty(1000, at::kFloat, "the all-reduce that breaks"));
  std::vector<at::Tensor> tensors = {tensor};
  const absl::Status status = Wait(r.pg->allreduce(tensors));
  RETURN_IF_ERROR(Check(!status.ok(), "an all-reduce rank 1 never called completed"));
  r.pg->shutdown();
  const int64_t freed = device::FakeDevice::frees_while_open();
  return Check(freed == 0,
               absl::StrCat("rank 0 freed ", freed, " allocations that rank 1 still maps"));
}

absl::Status BrokenGroup() {
  ASSIGN_OR_RETURN(std::unique_ptr<Rank> r, Join(nullptr, absl::Seconds(3)));
  const absl::Status before = BeforeTheBreak(*r);
  // Rank 1 tears down only after rank 0 has (until then it maps rank 0's
  // memory), and rank 0 ends (with the store's server) only after rank 1
  // has heard it.
  const std::string done = "test/rank 0 tore down";
  const std::string heard = "test/rank 1 heard it";
  const c10::intrusive_ptr<c10d::Store>& store = r->store->store();
  try {
    if (r->rank == 0) {
      const absl::Status result = before.ok() ? BreakAndTearDown(*r) : before;
      store->set(done, std::vector<uint8_t>{1});
      store->wait({heard}, std::chrono::seconds(60));
      return result;
    }
    store->wait({done}, std::chrono::seconds(60));
    store->set(heard, std::vector<uint8_t>{1});
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("the test's store: ", e.what()));
  }
  RETURN_IF_ERROR(before);
  r->pg->shutdown();
  return Check(r->pg->stats().teardown_failures > 0,
               "rank 1's teardown counted no failure, though rank 0's group broke and "
               "skipped the last barrier");
}

absl::Status RunRank(const std::string& which) {
  if (which == "device_fault") return DeviceFault();
  if (which == "broken") return BrokenGroup();
  ASSIGN_OR_RETURN(std::unique_ptr<Rank> r, Join());
  if (which == "collectives") {
    RETURN_IF_ERROR(AllReduces(*r));
    RETURN_IF_ERROR(OtherCollectives(*r));
    RETURN_IF_ERROR(ListFormsOnTheDevice(*r));
    RETURN_IF_ERROR(PointToPoint(*r));
    RETURN_IF_ERROR(Refusals(*r));
    RETURN_IF_ERROR(DevicePool(*r));
    RETURN_IF_ERROR(Counted(*r));
    return ShutDown(*r);
  }
  if (which == "point_to_point") {
    RETURN_IF_ERROR(PointToPoint(*r));
    return ShutDown(*r);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown case ", which));
}

std::map<std::string, std::string> Env(const char* which) {
  return {{kCaseEnv, which},
          {"RDMAFLOW_TRANSPORT_PARAMS", "tls=shm"},
          {"RDMAFLOW_STAGING_MB", "4"},
          {"RDMAFLOW_REGISTERED_MB", "8"},
          {"RDMAFLOW_DEVICE_MB", "1"},
          {"RDMAFLOW_DEVICE_POOL_MB", "2"}};
}

TEST(TorchBackendDeviceTest, EveryCallWithDeviceTensorsOnTwoAndThreeRanks) {
  SKIP_WITHOUT_GPU();
  for (int world : {2, 3}) {
    EXPECT_OK(launch::LaunchRanks(world, Env("collectives")).status) << world << " ranks";
  }
}

// The rings instead of the same-host paths: the device all-reduce stages
// through pinned host memory, and broadcasts sum rather than copy.
TEST(TorchBackendDeviceTest, EveryCallWithDirectAccessOff) {
  SKIP_WITHOUT_GPU();
  std::map<std::string, std::string> env = Env("collectives");
  env["RDMAFLOW_DIRECT"] = "off";
  EXPECT_OK(launch::LaunchRanks(2, env).status);
}

// One rank with RDMAFLOW_DEVICE_P2P=off: every rank sends through host
// memory (a send and its receive must take one path).
TEST(TorchBackendDeviceTest, DeviceToDeviceSendsNeedEveryRank) {
  SKIP_WITHOUT_GPU();
  std::map<std::string, std::string> env = Env("point_to_point");
  env["RDMAFLOW_TEST_P2P_OFF_ON_RANK"] = "1";
  EXPECT_OK(launch::LaunchRanks(2, env).status);
}

TEST(TorchBackendDeviceTest, ADeviceFaultFailsItsRanksWorkAndTheNextCallWorks) {
  if (OnCuda()) GTEST_SKIP() << "faults are injected on the fake device only";
  EXPECT_OK(launch::LaunchRanks(2, Env("device_fault")).status);
}

TEST(TorchBackendDeviceTest, ABrokenGroupFreesNoDeviceMemoryALivePeerMaps) {
  if (OnCuda()) GTEST_SKIP() << "the fake device alone tells a free a peer still maps";
  EXPECT_OK(launch::LaunchRanks(2, Env("broken")).status);
}

}  // namespace
}  // namespace rdmaflow

int main(int argc, char** argv) {
  return rdmaflow::launch::RanksOrTestsMain(
      argc, argv, rdmaflow::kCaseEnv,
      [](const char* which) { return rdmaflow::RunRank(which); });
}
