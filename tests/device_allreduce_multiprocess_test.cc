// File: device_allreduce_multiprocess_test.cc
// HostAllReduce on device memory (collectives/device_data_mover.h): OS
// processes, each with a fake device (device/fake: its IPC handles open only
// in another process, as CUDA's) and a DeviceTransport over UCX shared
// memory; every data region is device memory, read by the peers through
// IPC mappings and reduced by the device's reduce launches. Exact results
// (integers) on the one-shot and reduce-scatter/all-gather paths, at an
// offset per member, into a result buffer, in float16 and bfloat16 and by
// max; a reduce to a root and a broadcast; a type the device cannot reduce
// refused on every member alike; a device fault on one member failing
// every member's call by name, each returning only once its own device
// work ended; every Record of a member refused, costing only time; a
// member on host memory refused by the others' layout check.
// AllReduceGroup on device memory (options.device) takes each of its paths:
// two members of one host (the same-host paths in place), three hosts of
// one member (the flat ring on pinned host copies) and two hosts of two
// (hierarchical: the device reduce to each host's leader, the leaders' ring
// on host copies, the device broadcast); hosts are claimed per rank
// (AllReduceGroupOptions::host, DeviceTransportOptions::host_identity).
// The test binary re-executes itself per rank
// (launch/ranks_or_tests_main.h).
//
// RDMAFLOW_TEST_DEVICE=cuda runs the same cases on the GPU (tools/gpu_check.sh;
// two processes share it), but for the injected fault, which only the fake
// device has.
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collectives/allreduce_group.h"
#include "collectives/device_data_mover.h"
#include "collectives/host_allreduce.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "device/fake/fake_device.h"
#include "device/runtime_factory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launch/launcher.h"
#include "launch/rank.h"
#include "launch/ranks_or_tests_main.h"
#include "onesided/progress/progress_loop.h"
#include "rdma/builtin_transports.h"
#include "rdma/device/close_mappings.h"
#include "rdma/device/device_transport.h"

namespace rdmaflow::collectives {
namespace {

constexpr char kCaseEnv[] = "RDMAFLOW_DEVICE_ALLREDUCE_CASE";
constexpr char kDeviceEnv[] = "RDMAFLOW_TEST_DEVICE";
constexpr size_t kCapacity = 2 << 20;
constexpr absl::Duration kTimeout = absl::Seconds(30);

bool OnCuda() {
  const char* device = std::getenv(kDeviceEnv);
  return device != nullptr && std::string(device) == "cuda";
}

// On cuda where no GPU answers: why (the tests then skip); else empty.
std::string NoGpu() {
  if (!OnCuda()) return "";
  absl::StatusOr<std::unique_ptr<device::DeviceRuntime>> gpu = device::CreateDeviceRuntime("cuda");
  return gpu.ok() ? "" : std::string(gpu.status().message());
}

#define SKIP_WITHOUT_GPU()                                                    \
  if (const std::string why = NoGpu(); !why.empty()) {                        \
    GTEST_SKIP() << kDeviceEnv << "=cuda, but no GPU answers: " << why;       \
  }

HostAllReduceOptions Options(onesided::ProgressLoop* loop, DataMover* mover) {
  HostAllReduceOptions options;
  options.one_shot_max_bytes = 16 << 10;
  options.chunk_bytes = 64 << 10;
  options.timeout = kTimeout;
  options.loop = loop;
  options.mover = mover;
  return options;
}

// One rank's device, transport and collective, in their order of teardown.
struct DeviceRank {
  int rank = 0;
  int world = 0;
  std::unique_ptr<rdma::Store> store;
  std::unique_ptr<device::DeviceRuntime> device;
  std::unique_ptr<rdma::device_path::DeviceTransport> transport;
  std::unique_ptr<onesided::ProgressLoop> loop;
  rdma::MemoryRegion data;
  std::unique_ptr<device::Stream> stream;  // the test's uploads and downloads
  std::unique_ptr<DeviceDataMover> mover;
  std::unique_ptr<HostAllReduce> allreduce;
  std::unique_ptr<AllReduceGroup> group;  // the group cases, in place of the above

  // After the collective's Shutdown(): this rank closes its mappings of
  // the peers' regions and waits for every rank to have, before any frees
  // its own (the teardown after this; CUDA leaves freeing memory another
  // process still has open undefined).
  absl::Status CloseMappings() {
    return rdma::device_path::CloseMappingsTogether(*transport, *store, "test", world,
                                                    absl::Now() + kTimeout);
  }
  absl::Status Finish() {
    ASSIGN_OR_RETURN(std::unique_ptr<device::Event> done, device->CreateEvent());
    RETURN_IF_ERROR(stream->Record(*done));
    return done->WaitUntil(absl::Now() + kTimeout, "a test copy");
  }
  absl::Status Upload(std::byte* at, const void* from, size_t bytes) {
    RETURN_IF_ERROR(stream->Copy(at, from, bytes));
    return Finish();
  }
  template <typename T>
  absl::StatusOr<std::vector<T>> Download(const std::byte* at, size_t count) {
    std::vector<T> out(count);
    RETURN_IF_ERROR(stream->Copy(out.data(), at, count * sizeof(T)));
    RETURN_IF_ERROR(Finish());
    return out;
  }
};

// The host a rank claims when `per_host` ranks share one: "host-<n>".
std::string HostOf(int rank, int per_host) { return absl::StrCat("host-", rank / per_host); }

// Joins the job: store, device, transport, loop and test stream.
// `fail_operation` for rank 1's fake device (refused when enqueued where
// `refuse`, else failing when it runs), and each of its operations at
// least `rank1_delay` long (else 300 us); with `per_host` > 0 the device
// transport claims HostOf(rank, per_host).
absl::StatusOr<std::unique_ptr<DeviceRank>> JoinDevice(
    int fail_operation, int per_host = 0, absl::Duration rank1_delay = absl::ZeroDuration(),
    bool refuse = false) {
  auto r = std::make_unique<DeviceRank>();
  ASSIGN_OR_RETURN(launch::JoinedRank joined, launch::JoinJob());
  r->rank = joined.rank;
  r->world = joined.world_size;
  r->store = std::move(joined.store);
  device::FakeDeviceOptions device_options;
  if (r->rank == 1) {
    (refuse ? device_options.refuse_operation : device_options.fail_operation) = fail_operation;
  }
  // Device work lands well after it is enqueued: a word published before
  // its fence would let a peer read stale bytes, and the sums show it.
  device_options.operation_delay = absl::Microseconds(300);
  if (r->rank == 1 && rank1_delay > absl::ZeroDuration()) {
    device_options.operation_delay = rank1_delay;
  }
  if (OnCuda()) {
    ASSIGN_OR_RETURN(r->device, device::CreateDeviceRuntime("cuda"));
  } else {
    ASSIGN_OR_RETURN(r->device, device::FakeDevice::Create(device_options));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<rdma::Transport> host,
                   rdma::CreateBuiltinTransport("ucx", "tls=shm", r->rank));
  rdma::device_path::DeviceTransportOptions transport_options;
  if (per_host > 0) transport_options.host_identity = HostOf(r->rank, per_host);
  ASSIGN_OR_RETURN(r->transport, rdma::device_path::DeviceTransport::Create(
                                     std::move(host), r->device.get(), transport_options));
  r->loop = std::make_unique<onesided::ProgressLoop>(*r->transport, onesided::ProgressLoopOptions{});
  ASSIGN_OR_RETURN(r->stream, r->device->CreateStream());
  return r;
}

// Joins the job with a HostAllReduce; `fail_operation`, `refuse` and
// `rank1_delay` for rank 1's fake device; rank 0 on host memory when
// `host_rank0`.
absl::StatusOr<std::unique_ptr<DeviceRank>> Join(int fail_operation = 0, bool host_rank0 = false,
                                                 absl::Duration rank1_delay = absl::ZeroDuration(),
                                                 bool refuse = false) {
  ASSIGN_OR_RETURN(std::unique_ptr<DeviceRank> r,
                   JoinDevice(fail_operation, /*per_host=*/0, rank1_delay, refuse));
  const bool host_memory = host_rank0 && r->rank == 0;
  if (host_memory) {
    ASSIGN_OR_RETURN(r->data, r->transport->Allocate(kCapacity));
  } else {
    ASSIGN_OR_RETURN(r->data, r->transport->AllocateDevice(kCapacity));
  }
  ASSIGN_OR_RETURN(r->mover, DeviceDataMover::Create(*r->transport));
  std::vector<int> members(r->world);
  std::iota(members.begin(), members.end(), 0);
  ASSIGN_OR_RETURN(r->allreduce,
                   HostAllReduce::Create(*r->transport, *r->store, "dev", members, r->data,
                                         Options(r->loop.get(),
                                                 host_memory ? nullptr : r->mover.get())));
  return r;
}

float Value(int rank, size_t i) { return static_cast<float>((i * 7 + rank * 13) % 97); }

absl::Status Mismatch(const std::string& what, size_t i, double got, double expected) {
  return absl::DataLossError(
      absl::StrCat(what, ": element ", i, " is ", got, ", expected ", expected));
}

// float32 sums at every size, each member at an offset of its own.
absl::Status CheckSums(DeviceRank& r) {
  const size_t offset = static_cast<size_t>(r.rank) * 256;
  for (size_t count : {size_t{1}, size_t{1000}, size_t{4096}, size_t{100003}}) {
    std::vector<float> in(count);
    for (size_t i = 0; i < count; ++i) in[i] = Value(r.rank, i);
    std::byte* at = r.data.data() + offset;
    RETURN_IF_ERROR(r.Upload(at, in.data(), count * 4));
    RETURN_IF_ERROR(r.allreduce->AllReduce(offset, count, DataType::kFloat32));
    ASSIGN_OR_RETURN(std::vector<float> out, r.Download<float>(at, count));
    for (size_t i = 0; i < count; ++i) {
      float expected = 0;
      for (int p = 0; p < r.world; ++p) expected += Value(p, i);
      if (out[i] != expected) {
        return Mismatch(absl::StrCat("rank ", r.rank, ", sum of ", count), i, out[i], expected);
      }
    }
  }
  if (r.allreduce->stats().bytes_read == 0 || r.allreduce->stats().one_shot_calls != 3) {
    return absl::InternalError(absl::StrCat(
        "rank ", r.rank, ": read ", r.allreduce->stats().bytes_read, " bytes of peers in ",
        r.allreduce->stats().one_shot_calls, " one-shot calls (expected 3)"));
  }
  return absl::OkStatus();
}

// Half-precision types, max, and the result in a buffer of its own.
absl::Status CheckHalvesAndResult(DeviceRank& r) {
  constexpr size_t kCount = 50001;  // the reduce-scatter path
  std::vector<uint16_t> in(kCount);
  for (size_t i = 0; i < kCount; ++i) in[i] = FloatToBFloat16(Value(r.rank, i));
  RETURN_IF_ERROR(r.Upload(r.data.data(), in.data(), kCount * 2));
  RETURN_IF_ERROR(r.allreduce->AllReduce(0, kCount, DataType::kBFloat16, ReduceOp::kMax));
  ASSIGN_OR_RETURN(std::vector<uint16_t> out, r.Download<uint16_t>(r.data.data(), kCount));
  for (size_t i = 0; i < kCount; ++i) {
    float expected = 0;
    for (int p = 0; p < r.world; ++p) expected = std::max(expected, Value(p, i));
    if (BFloat16ToFloat(out[i]) != expected) {
      return Mismatch("bfloat16 max", i, BFloat16ToFloat(out[i]), expected);
    }
  }
  ASSIGN_OR_RETURN(device::DeviceMemory result, r.device->Allocate(kCount * 2));
  for (size_t count : {size_t{2000}, kCount}) {
    for (size_t i = 0; i < count; ++i) in[i] = FloatToHalf(Value(r.rank, i));
    RETURN_IF_ERROR(r.Upload(r.data.data(), in.data(), count * 2));
    RETURN_IF_ERROR(r.allreduce->AllReduce(0, count, DataType::kFloat16, ReduceOp::kSum, 0,
                                           static_cast<std::byte*>(result.data())));
    ASSIGN_OR_RETURN(out, r.Download<uint16_t>(static_cast<std::byte*>(result.data()), count));
    for (size_t i = 0; i < count; ++i) {
      float expected = 0;
      for (int p = 0; p < r.world; ++p) expected += Value(p, i);
      if (HalfToFloat(out[i]) != expected) {
        return Mismatch(absl::StrCat("float16 sum of ", count, " into a result buffer"), i,
                        HalfToFloat(out[i]), expected);
      }
    }
  }
  return absl::OkStatus();
}

// A reduce to the last member, then a broadcast from it.
absl::Status CheckReduceAndBroadcast(DeviceRank& r) {
  constexpr size_t kCount = 70000;
  const int root = r.world - 1;
  std::vector<float> in(kCount);
  for (size_t i = 0; i < kCount; ++i) in[i] = Value(r.rank, i);
  RETURN_IF_ERROR(r.Upload(r.data.data(), in.data(), kCount * 4));
  RETURN_IF_ERROR(r.allreduce->Reduce(0, kCount, DataType::kFloat32, ReduceOp::kSum, root));
  RETURN_IF_ERROR(r.allreduce->Broadcast(0, kCount * 4, root));
  ASSIGN_OR_RETURN(std::vector<float> out, r.Download<float>(r.data.data(), kCount));
  for (size_t i = 0; i < kCount; ++i) {
    float expected = 0;
    for (int p = 0; p < r.world; ++p) expected += Value(p, i);
    if (out[i] != expected) return Mismatch("reduce then broadcast", i, out[i], expected);
  }
  return absl::OkStatus();
}

absl::Status Exact() {
  ASSIGN_OR_RETURN(std::unique_ptr<DeviceRank> r, Join());
  RETURN_IF_ERROR(CheckSums(*r));
  RETURN_IF_ERROR(CheckHalvesAndResult(*r));
  RETURN_IF_ERROR(CheckReduceAndBroadcast(*r));
  // A type the device does not reduce: refused on every member, and the
  // collective still works after it.
  absl::Status refused = r->allreduce->AllReduce(0, 16, DataType::kInt32);
  if (!absl::IsInvalidArgument(refused) ||
      !absl::StrContains(refused.message(), "float32, float16 and bfloat16")) {
    return absl::InternalError(
        absl::StrCat("rank ", r->rank, ": an int32 call gave ", refused.ToString()));
  }
  RETURN_IF_ERROR(CheckReduceAndBroadcast(*r));
  RETURN_IF_ERROR(r->allreduce->Shutdown());
  return r->CloseMappings();
}

// Rank 1's device fails its second operation (the first call's reduction):
// its call fails with the fault, the others' with kAborted naming it.
absl::Status Fault() {
  ASSIGN_OR_RETURN(std::unique_ptr<DeviceRank> r, Join(/*fail_operation=*/2));
  std::vector<float> in(100003, 1.0f);
  RETURN_IF_ERROR(r->Upload(r->data.data(), in.data(), in.size() * 4));
  absl::Status status = r->allreduce->AllReduce(0, in.size(), DataType::kFloat32);
  const bool named = r->rank == 1 ? absl::StrContains(status.message(), "injected fault")
                                  : absl::IsAborted(status) &&
                                        absl::StrContains(status.message(), "rank 1 gave up");
  if (status.ok() || !named) {
    return absl::InternalError(absl::StrCat("rank ", r->rank, ": with rank 1's device failing, "
                                            "the call gave ", status.ToString()));
  }
  RETURN_IF_ERROR(r->allreduce->Shutdown());
  return r->CloseMappings();
}

// Whether the fake device of `r` ran everything queued on it: an error
// naming `what` where work is still queued.
absl::Status ExpectIdle(DeviceRank& r, device::FakeDevice& fake, const std::string& what) {
  const absl::StatusOr<bool> idle = fake.Idle();
  if (idle.ok() && *idle) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("rank ", r.rank, ": ", what,
                                          " returned with its device work still queued (",
                                          idle.ok() ? "not idle" : idle.status().ToString(), ")"));
}

// Rank 1's device refuses every Record during the call, with each of its
// operations 20 ms long: a refused Record costs only time. Every member's
// call succeeds with the exact sums, and rank 1's returns only once its
// device work ended (no mark was reached before its work: only the stream
// going idle could say so).
absl::Status RecordsRefused() {
  ASSIGN_OR_RETURN(std::unique_ptr<DeviceRank> r,
                   Join(0, /*host_rank0=*/false, /*rank1_delay=*/absl::Milliseconds(20)));
  auto* fake = dynamic_cast<device::FakeDevice*>(r->device.get());
  if (fake == nullptr) return absl::InternalError("not on the fake device");
  constexpr size_t kCount = 100003;
  std::vector<float> in(kCount);
  for (size_t i = 0; i < kCount; ++i) in[i] = Value(r->rank, i);
  RETURN_IF_ERROR(r->Upload(r->data.data(), in.data(), in.size() * 4));
  if (r->rank == 1) fake->FailRecords(std::numeric_limits<int>::max());
  const absl::Status status = r->allreduce->AllReduce(0, kCount, DataType::kFloat32);
  const absl::Status idle = ExpectIdle(*r, *fake, "the call");
  const int refused = fake->records_left_to_fail();
  fake->FailRecords(0);
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat("rank ", r->rank, ": with rank 1's Records refused, ",
                                            "the call gave ", status.ToString()));
  }
  RETURN_IF_ERROR(idle);
  if (r->rank == 1 && refused == std::numeric_limits<int>::max()) {
    return absl::InternalError("rank 1's call recorded no event: nothing was refused");
  }
  ASSIGN_OR_RETURN(std::vector<float> out, r->Download<float>(r->data.data(), kCount));
  for (size_t i = 0; i < kCount; ++i) {
    float expected = 0;
    for (int p = 0; p < r->world; ++p) expected += Value(p, i);
    if (out[i] != expected) return Mismatch("with Records refused", i, out[i], expected);
  }
  RETURN_IF_ERROR(r->allreduce->Shutdown());
  return r->CloseMappings();
}

// Rank 1's device refuses its second reduction when it is enqueued (as
// CUDA refuses a launch it cannot run), with the first still running (100
// ms an operation, far more than the enqueues between them take): its call fails with the refusal
// only once that reduction ended, so nothing of the call reads a peer's buffer or writes ours after
// it returned; the others' calls fail naming it.
absl::Status AbandonedWork() {
  // Operation 1 is the upload, 2 the first reduction.
  ASSIGN_OR_RETURN(std::unique_ptr<DeviceRank> r,
                   Join(/*fail_operation=*/3, /*host_rank0=*/false,
                        /*rank1_delay=*/absl::Milliseconds(100), /*refuse=*/true));
  auto* fake = dynamic_cast<device::FakeDevice*>(r->device.get());
  if (fake == nullptr) return absl::InternalError("not on the fake device");
  std::vector<float> in(100003, 1.0f);
  RETURN_IF_ERROR(r->Upload(r->data.data(), in.data(), in.size() * 4));
  const absl::Status status = r->allreduce->AllReduce(0, in.size(), DataType::kFloat32);
  const absl::Status idle = ExpectIdle(*r, *fake, "the failed call");
  const bool named = r->rank == 1 ? absl::StrContains(status.message(), "injected fault")
                                  : absl::IsAborted(status) &&
                                        absl::StrContains(status.message(), "rank 1 gave up");
  if (status.ok() || !named) {
    return absl::InternalError(absl::StrCat("rank ", r->rank,
                                            ": with rank 1's device refusing a reduction, the "
                                            "call gave ",
                                            status.ToString()));
  }
  RETURN_IF_ERROR(idle);
  RETURN_IF_ERROR(r->allreduce->Shutdown());
  return r->CloseMappings();
}

// Rank 0 holds host memory, rank 1 device memory: neither takes the other's
// layout.
absl::Status Mixed() {
  absl::StatusOr<std::unique_ptr<DeviceRank>> r = Join(0, /*host_rank0=*/true);
  if (r.ok() || !absl::IsFailedPrecondition(r.status()) ||
      !absl::StrContains(r.status().message(), "memory=")) {
    return absl::InternalError(
        absl::StrCat("a member among host and device ones got ", r.status().ToString()));
  }
  return absl::OkStatus();
}

// An AllReduceGroup on device memory, `per_host` members per host; checks
// that large calls took `expected_large`, and float32 sums and a bfloat16
// max into a result buffer exactly.
absl::Status Group(int per_host, AllReduceAlgorithm expected_large) {
  ASSIGN_OR_RETURN(std::unique_ptr<DeviceRank> r, JoinDevice(0, per_host));
  AllReduceGroupOptions options;
  options.ring.name = "devgroup";
  options.ring.capacity_bytes = kCapacity;
  options.ring.chunk_bytes = 64 << 10;
  options.ring.timeout = kTimeout;
  options.ring.loop = r->loop.get();
  options.host = HostOf(r->rank, per_host);
  options.device = r->transport.get();
  options.device_one_shot_max_bytes = 16 << 10;
  options.device_chunk_bytes = 64 << 10;
  std::vector<int> members(r->world);
  std::iota(members.begin(), members.end(), 0);
  ASSIGN_OR_RETURN(r->group, AllReduceGroup::Create(*r->transport, *r->store, "devg",
                                                    members, options));
  if (!r->group->on_device()) return absl::InternalError("the group is not on the device");
  std::byte* data = r->group->data();
  const size_t offset = 512;  // the same on every member: the rings need it
  for (size_t count : {size_t{3}, size_t{100003}}) {
    std::vector<float> in(count);
    for (size_t i = 0; i < count; ++i) in[i] = Value(r->rank, i);
    RETURN_IF_ERROR(r->Upload(data + offset, in.data(), count * 4));
    RETURN_IF_ERROR(r->group->AllReduce(offset, count, DataType::kFloat32));
    const AllReduceAlgorithm took = r->group->last_algorithm();
    if (count > 4096 && took != expected_large) {
      return absl::InternalError(absl::StrCat("rank ", r->rank, ": ", count, " floats took ",
                                              AlgorithmName(took), ", expected ",
                                              AlgorithmName(expected_large)));
    }
    ASSIGN_OR_RETURN(std::vector<float> out, r->Download<float>(data + offset, count));
    for (size_t i = 0; i < count; ++i) {
      float expected = 0;
      for (int p = 0; p < r->world; ++p) expected += Value(p, i);
      if (out[i] != expected) {
        return Mismatch(
            absl::StrCat("rank ", r->rank, ", ", AlgorithmName(took), " sum of ", count), i,
            out[i], expected);
      }
    }
  }
  // bfloat16 max into a result buffer of device memory.
  constexpr size_t kCount = 50001;
  std::vector<uint16_t> halves(kCount);
  for (size_t i = 0; i < kCount; ++i) halves[i] = FloatToBFloat16(Value(r->rank, i));
  RETURN_IF_ERROR(r->Upload(data, halves.data(), kCount * 2));
  ASSIGN_OR_RETURN(device::DeviceMemory result, r->device->Allocate(kCount * 2));
  auto* result_at = static_cast<std::byte*>(result.data());
  RETURN_IF_ERROR(
      r->group->AllReduce(0, kCount, DataType::kBFloat16, ReduceOp::kMax, 0, result_at));
  ASSIGN_OR_RETURN(std::vector<uint16_t> out, r->Download<uint16_t>(result_at, kCount));
  for (size_t i = 0; i < kCount; ++i) {
    float expected = 0;
    for (int p = 0; p < r->world; ++p) expected = std::max(expected, Value(p, i));
    if (BFloat16ToFloat(out[i]) != expected) {
      return Mismatch("bfloat16 max into a result buffer", i, BFloat16ToFloat(out[i]),
                      expected);
    }
  }
  // A device result overlapping its range: refused on every member alike,
  // and the group goes on.
  absl::Status overlapping =
      r->group->AllReduce(offset, 16, DataType::kFloat32, ReduceOp::kSum, 0, data + offset + 8);
  if (!absl::IsInvalidArgument(overlapping)) {
    return absl::InternalError(absl::StrCat("rank ", r->rank, ": a result overlapping its range gave ",
                                            overlapping.ToString()));
  }
  RETURN_IF_ERROR(r->group->AllReduce(offset, 16, DataType::kFloat32));
  // A type the device does not reduce: refused on every member before any
  // waits (the ring could reduce it on the host; the device paths not).
  absl::Status int32 = r->group->AllReduce(offset, 16, DataType::kInt32);
  if (!absl::IsInvalidArgument(int32)) {
    return absl::InternalError(
        absl::StrCat("rank ", r->rank, ": an int32 call gave ", int32.ToString()));
  }
  RETURN_IF_ERROR(r->group->AllReduce(offset, 16, DataType::kFloat32));
  // A broadcast of any bytes, copied straight out of the root's region:
  // with every member on one host; refused alike on every member
  // otherwise, and the group goes on.
  constexpr size_t kBytes = 40001;
  const int root = r->world - 1;
  auto pattern = [](int rank, size_t i) {
    return static_cast<uint8_t>((i * 131 + static_cast<size_t>(rank) * 77 + 5) & 0xff);
  };
  std::vector<uint8_t> mine(kBytes);
  for (size_t i = 0; i < kBytes; ++i) mine[i] = pattern(r->rank, i);
  RETURN_IF_ERROR(r->Upload(data + offset, mine.data(), kBytes));
  absl::Status broadcast = r->group->Broadcast(offset, kBytes, root);
  if (r->group->direct()) {
    RETURN_IF_ERROR(broadcast);
    ASSIGN_OR_RETURN(std::vector<uint8_t> got, r->Download<uint8_t>(data + offset, kBytes));
    for (size_t i = 0; i < kBytes; ++i) {
      if (got[i] != pattern(root, i)) return Mismatch("a broadcast's byte", i, got[i], pattern(root, i));
    }
  } else if (!absl::IsFailedPrecondition(broadcast)) {
    return absl::InternalError(absl::StrCat("rank ", r->rank, ": a broadcast across hosts gave ",
                                            broadcast.ToString()));
  }
  RETURN_IF_ERROR(r->group->AllReduce(offset, 16, DataType::kFloat32));
  RETURN_IF_ERROR(r->group->Shutdown());
  return r->CloseMappings();
}

// Rank 1 cannot allocate its device region: it fails, and rank 0 fails at
// once quoting why, rather than waiting for it.
absl::Status GroupBadSetUp() {
  ASSIGN_OR_RETURN(std::unique_ptr<DeviceRank> r, JoinDevice(0, 2));
  AllReduceGroupOptions options;
  options.ring.capacity_bytes = r->rank == 1 ? size_t{1} << 40 : kCapacity;
  options.ring.timeout = kTimeout;
  options.ring.loop = r->loop.get();
  options.device = r->transport.get();
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<AllReduceGroup>> group =
      AllReduceGroup::Create(*r->transport, *r->store, "devg", {0, 1}, options);
  const bool named = r->rank == 1 ? !group.ok()
                                  : absl::IsAborted(group.status()) &&
                                        absl::StrContains(group.status().message(),
                                                          "rank 1 could not set it up");
  if (!named || absl::Now() - start > kTimeout / 2) {
    return absl::InternalError(absl::StrCat("rank ", r->rank, ": with rank 1 unable to "
                                            "allocate, Create gave ", group.status().ToString()));
  }
  return absl::OkStatus();
}

// Rank 0 creates the group on host memory, rank 1 on device memory: both
// refuse, naming the other's setting.
absl::Status GroupMixed() {
  ASSIGN_OR_RETURN(std::unique_ptr<DeviceRank> r, JoinDevice(0, 2));
  AllReduceGroupOptions options;
  options.ring.capacity_bytes = kCapacity;
  options.ring.timeout = kTimeout;
  options.ring.loop = r->loop.get();
  options.device = r->rank == 0 ? nullptr : r->transport.get();
  absl::StatusOr<std::unique_ptr<AllReduceGroup>> group =
      AllReduceGroup::Create(*r->transport, *r->store, "devg", {0, 1}, options);
  if (group.ok() || !absl::IsFailedPrecondition(group.status()) ||
      !absl::StrContains(group.status().message(), "memory=")) {
    return absl::InternalError(absl::StrCat("rank ", r->rank, ": a group of host and device ",
                                            "members gave ", group.status().ToString()));
  }
  return absl::OkStatus();
}

absl::Status RunCase(const std::string& name);

// A case, then (its ranks' memory freed) whether this rank freed any a
// peer still had open.
absl::Status RunRank(const char* which) {
  RETURN_IF_ERROR(RunCase(which));
  if (const int64_t freed = device::FakeDevice::frees_while_open(); freed > 0) {
    return absl::InternalError(absl::StrCat(freed, " allocations freed while a peer still had "
                                            "them open (the fake device's lines above)"));
  }
  return absl::OkStatus();
}

absl::Status RunCase(const std::string& name) {
  if (name == "exact") return Exact();
  if (name == "fault") return Fault();
  if (name == "records-refused") return RecordsRefused();
  if (name == "abandoned") return AbandonedWork();
  if (name == "mixed") return Mixed();
  if (name == "group-host") return Group(2, AllReduceAlgorithm::kHostScatterGather);
  if (name == "group-ring") return Group(1, AllReduceAlgorithm::kRing);
  if (name == "group-hierarchical") return Group(2, AllReduceAlgorithm::kHierarchical);
  if (name == "group-mixed") return GroupMixed();
  if (name == "group-bad-set-up") return GroupBadSetUp();
  return absl::InvalidArgumentError(absl::StrCat("unknown case ", name));
}

TEST(DeviceAllReduceTest, ThreeProcessesReduceEachOthersDeviceMemoryExactly) {
  SKIP_WITHOUT_GPU();
  EXPECT_OK(launch::LaunchRanks(3, {{kCaseEnv, "exact"}}).status);
}

TEST(DeviceAllReduceTest, AFailingDeviceFailsEveryMembersCallByName) {
  if (OnCuda()) GTEST_SKIP() << "faults are injected on the fake device only";
  EXPECT_OK(launch::LaunchRanks(2, {{kCaseEnv, "fault"}}).status);
}

TEST(DeviceAllReduceTest, RefusedRecordsCostOnlyTime) {
  if (OnCuda()) GTEST_SKIP() << "failing Records are injected on the fake device only";
  EXPECT_OK(launch::LaunchRanks(2, {{kCaseEnv, "records-refused"}}).status);
}

TEST(DeviceAllReduceTest, AFailedCallReturnsOnlyOnceItsDeviceWorkEnded) {
  if (OnCuda()) GTEST_SKIP() << "faults are injected on the fake device only";
  EXPECT_OK(launch::LaunchRanks(2, {{kCaseEnv, "abandoned"}}).status);
}

TEST(DeviceAllReduceTest, HostAndDeviceMembersRefuseEachOther) {
  SKIP_WITHOUT_GPU();
  EXPECT_OK(launch::LaunchRanks(2, {{kCaseEnv, "mixed"}}).status);
}

TEST(DeviceAllReduceGroupTest, TwoMembersOfOneHostReduceInPlaceOnTheDevice) {
  SKIP_WITHOUT_GPU();
  EXPECT_OK(launch::LaunchRanks(2, {{kCaseEnv, "group-host"}}).status);
}

TEST(DeviceAllReduceGroupTest, OneMemberPerHostRingsOnHostCopies) {
  SKIP_WITHOUT_GPU();
  EXPECT_OK(launch::LaunchRanks(3, {{kCaseEnv, "group-ring"}}).status);
}

TEST(DeviceAllReduceGroupTest, TwoHostsOfTwoReduceHierarchically) {
  SKIP_WITHOUT_GPU();
  EXPECT_OK(launch::LaunchRanks(4, {{kCaseEnv, "group-hierarchical"}}).status);
}

TEST(DeviceAllReduceGroupTest, HostAndDeviceMembersRefuseEachOther) {
  SKIP_WITHOUT_GPU();
  EXPECT_OK(launch::LaunchRanks(2, {{kCaseEnv, "group-mixed"}}).status);
}

TEST(DeviceAllReduceGroupTest, AMemberThatCannotSetUpFailsTheOthersAtOnce) {
  SKIP_WITHOUT_GPU();
  EXPECT_OK(launch::LaunchRanks(2, {{kCaseEnv, "group-bad-set-up"}}).status);
}

}  // namespace
}  // namespace rdmaflow::collectives

int main(int argc, char** argv) {
  return rdmaflow::launch::RanksOrTestsMain(argc, argv, rdmaflow::collectives::kCaseEnv,
                                            rdmaflow::collectives::RunRank);
}
