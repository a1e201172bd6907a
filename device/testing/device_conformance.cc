#include "device/testing/device_conformance.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/poll_until.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"

namespace rdmaflow::device::testing {
namespace {

using ::rdmaflow::testing::IsOk;
using ::rdmaflow::testing::IsOkAndHolds;
using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

// The IPC test's peer process: the runtime's name and the handle (hex).
constexpr char kChildEnv[] = "RDMAFLOW_DEVICE_IPC_CHILD";
constexpr char kHandleEnv[] = "RDMAFLOW_DEVICE_IPC_HANDLE";
constexpr absl::Duration kTimeout = absl::Seconds(60);

// Byte i of pattern `salt`.
uint8_t PatternByte(size_t i, uint8_t salt) { return static_cast<uint8_t>(i * 131 + salt); }
std::vector<uint8_t> Pattern(size_t bytes, uint8_t salt) {
  std::vector<uint8_t> out(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = PatternByte(i, salt);
  return out;
}

// Runs what is queued on `stream` so far to completion.
absl::Status Finish(DeviceRuntime& runtime, Stream& stream, const std::string& what) {
  ASSIGN_OR_RETURN(std::unique_ptr<Event> done, runtime.CreateEvent());
  RETURN_IF_ERROR(stream.Record(*done));
  return done->WaitUntil(absl::Now() + kTimeout, what);
}

// Host `data` into device memory at `at`, through `stream`.
absl::Status Upload(DeviceRuntime& runtime, Stream& stream, void* at,
                    const std::vector<uint8_t>& data) {
  RETURN_IF_ERROR(stream.Copy(at, data.data(), data.size()));
  return Finish(runtime, stream, "an upload");
}

absl::StatusOr<std::vector<uint8_t>> Download(DeviceRuntime& runtime, Stream& stream,
                                              const void* at, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  RETURN_IF_ERROR(stream.Copy(out.data(), at, bytes));
  RETURN_IF_ERROR(Finish(runtime, stream, "a download"));
  return out;
}

// The peer's role: open the handle, check pattern 7 over the allocation,
// write pattern 9 into it, and exit 0; or say what failed and exit 1.
int RunChild(const DeviceBackend& backend, const std::string& handle_hex) {
  auto fail = [](const absl::Status& status) {
    std::fprintf(stderr, "ipc peer: %s\n", status.ToString().c_str());
    return 1;
  };
  const std::string raw = absl::HexStringToBytes(handle_hex);
  IpcHandle handle;
  if (raw.size() != IpcHandle::kBytes) return fail(absl::InvalidArgumentError("handle size"));
  std::memcpy(handle.bytes.data(), raw.data(), raw.size());
  absl::StatusOr<std::unique_ptr<DeviceRuntime>> runtime = backend.create();
  if (!runtime.ok()) return fail(runtime.status());
  absl::StatusOr<DeviceMemory> mapped = (*runtime)->OpenIpc(handle);
  if (!mapped.ok()) return fail(mapped.status());
  absl::StatusOr<std::unique_ptr<Stream>> stream = (*runtime)->CreateStream();
  if (!stream.ok()) return fail(stream.status());
  absl::StatusOr<PointerInfo> info = (*runtime)->Query(mapped->data());
  if (!info.ok()) return fail(info.status());
  if (info->kind != MemoryKind::kDevice) {
    return fail(absl::InternalError("a mapped peer allocation is not device memory"));
  }
  absl::StatusOr<std::vector<uint8_t>> seen =
      Download(**runtime, **stream, mapped->data(), mapped->size());
  if (!seen.ok()) return fail(seen.status());
  if (*seen != Pattern(mapped->size(), 7)) {
    return fail(absl::InternalError("the peer's allocation does not hold what it wrote"));
  }
  absl::Status wrote = Upload(**runtime, **stream, mapped->data(), Pattern(mapped->size(), 9));
  if (!wrote.ok()) return fail(wrote);
  return 0;
}

// Starts this binary as the IPC peer of `backend` for `handle`; its exit
// code, or -1 when it did not end within kTimeout (then it is killed).
int RunPeer(const DeviceBackend& backend, const IpcHandle& handle) {
  const std::string hex = absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(handle.bytes.data()), handle.bytes.size()));
  const pid_t child = fork();
  if (child < 0) return -1;
  if (child == 0) {
    setenv(kChildEnv, backend.name.c_str(), 1);
    setenv(kHandleEnv, hex.c_str(), 1);
    execl("/proc/self/exe", "device_ipc_peer", nullptr);
    _exit(127);
  }
  const absl::Time deadline = absl::Now() + kTimeout;
  int status = 0;
  while (waitpid(child, &status, WNOHANG) == 0) {
    if (absl::Now() > deadline) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      return -1;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The runtime under test, or a skip when it cannot start here.
#define RDMAFLOW_CREATE_OR_SKIP(var)                          \
  absl::StatusOr<std::unique_ptr<DeviceRuntime>> var##_or =   \
      GetParam().create();                                    \
  if (absl::IsUnavailable(var##_or.status())) {               \
    GTEST_SKIP() << var##_or.status().message();              \
  }                                                           \
  ASSERT_OK(var##_or.status());                               \
  DeviceRuntime& var = **var##_or

TEST_P(DeviceConformanceTest, AllocationsAreDeviceMemory) {
  RDMAFLOW_CREATE_OR_SKIP(runtime);
  EXPECT_FALSE(runtime.name().empty());
  ASSERT_OK_AND_ASSIGN(DeviceMemory memory, runtime.Allocate(1 << 20));
  ASSERT_NE(memory.data(), nullptr);
  EXPECT_EQ(memory.size(), size_t{1} << 20);
  auto* inside = static_cast<std::byte*>(memory.data()) + 12345;
  ASSERT_OK_AND_ASSIGN(PointerInfo info, runtime.Query(inside));
  EXPECT_EQ(info.kind, MemoryKind::kDevice);
  EXPECT_EQ(info.device, runtime.device());
  EXPECT_EQ(info.base, memory.data());
  EXPECT_GE(info.size, memory.size());
  std::vector<int> host(10);
  ASSERT_OK_AND_ASSIGN(PointerInfo host_info, runtime.Query(host.data()));
  EXPECT_EQ(host_info.kind, MemoryKind::kHost);
  EXPECT_THAT(runtime.Query(nullptr), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(runtime.Allocate(0), Not(IsOk()));
}

TEST_P(DeviceConformanceTest, CopiesEveryWayAtOddSizes) {
  RDMAFLOW_CREATE_OR_SKIP(runtime);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> stream, runtime.CreateStream());
  ASSERT_OK_AND_ASSIGN(DeviceMemory a, runtime.Allocate(9 << 20));
  ASSERT_OK_AND_ASSIGN(DeviceMemory b, runtime.Allocate(9 << 20));
  std::vector<uint8_t> pinned(9 << 20);
  ASSERT_OK(runtime.PinHost(pinned.data(), pinned.size()));
  for (size_t bytes : {size_t{1}, size_t{7}, size_t{4099}, size_t{1} << 20, (size_t{8} << 20) + 3}) {
    SCOPED_TRACE(absl::StrCat(bytes, " bytes"));
    const std::vector<uint8_t> data = Pattern(bytes, static_cast<uint8_t>(bytes));
    auto* a_at = static_cast<std::byte*>(a.data()) + 5;
    auto* b_at = static_cast<std::byte*>(b.data()) + 17;
    // Pageable host -> device, device -> device, device -> pinned host.
    ASSERT_OK(stream->Copy(a_at, data.data(), bytes));
    ASSERT_OK(stream->Copy(b_at, a_at, bytes));
    std::fill(pinned.begin(), pinned.end(), 0);
    ASSERT_OK(stream->Copy(pinned.data() + 3, b_at, bytes));
    ASSERT_OK(Finish(runtime, *stream, "the copies"));
    EXPECT_TRUE(std::equal(data.begin(), data.end(), pinned.begin() + 3));
    EXPECT_EQ(pinned[2], 0);
    EXPECT_EQ(pinned[3 + bytes], 0);
  }
  ASSERT_OK(runtime.UnpinHost(pinned.data()));
  EXPECT_THAT(runtime.UnpinHost(pinned.data()), Not(IsOk()));
}

TEST_P(DeviceConformanceTest, StreamRunsInOrder) {
  RDMAFLOW_CREATE_OR_SKIP(runtime);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> stream, runtime.CreateStream());
  constexpr size_t kBytes = 1 << 20;
  ASSERT_OK_AND_ASSIGN(DeviceMemory chain, runtime.Allocate(kBytes * 8));
  auto* base = static_cast<std::byte*>(chain.data());
  const std::vector<uint8_t> data = Pattern(kBytes, 3);
  // Each copy reads what the previous one wrote: right only in order.
  ASSERT_OK(stream->Copy(base, data.data(), kBytes));
  for (int i = 1; i < 8; ++i) {
    ASSERT_OK(stream->Copy(base + i * kBytes, base + (i - 1) * kBytes, kBytes));
  }
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> last,
                       Download(runtime, *stream, base + 7 * kBytes, kBytes));
  EXPECT_EQ(last, data);
}

// Zero() clears exactly its range, in stream order after a copy into it.
TEST_P(DeviceConformanceTest, ZeroesARangeInStreamOrder) {
  RDMAFLOW_CREATE_OR_SKIP(runtime);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> stream, runtime.CreateStream());
  constexpr size_t kBytes = (1 << 20) + 13;
  ASSERT_OK_AND_ASSIGN(DeviceMemory memory, runtime.Allocate(kBytes));
  auto* base = static_cast<std::byte*>(memory.data());
  const std::vector<uint8_t> data = Pattern(kBytes, 4);
  ASSERT_OK(stream->Copy(base, data.data(), kBytes));
  ASSERT_OK(stream->Zero(base + 7, kBytes - 20));
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> seen, Download(runtime, *stream, base, kBytes));
  std::vector<uint8_t> expected = data;
  std::fill(expected.begin() + 7, expected.end() - 13, 0);
  EXPECT_EQ(seen, expected);
  EXPECT_OK(stream->Zero(base, 0));
  EXPECT_THAT(stream->Zero(nullptr, 8), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_P(DeviceConformanceTest, EventsOrderStreams) {
  RDMAFLOW_CREATE_OR_SKIP(runtime);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> first, runtime.CreateStream());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> second, runtime.CreateStream());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Event> written, runtime.CreateEvent());
  ASSERT_OK_AND_ASSIGN(bool never_recorded, written->Done());
  EXPECT_TRUE(never_recorded);
  constexpr size_t kBytes = 4 << 20;
  ASSERT_OK_AND_ASSIGN(DeviceMemory memory, runtime.Allocate(kBytes));
  for (uint8_t round = 0; round < 4; ++round) {
    const std::vector<uint8_t> data = Pattern(kBytes, round);
    ASSERT_OK(first->Copy(memory.data(), data.data(), kBytes));
    ASSERT_OK(first->Record(*written));
    ASSERT_OK(second->WaitFor(*written));
    std::vector<uint8_t> out(kBytes);
    ASSERT_OK(second->Copy(out.data(), memory.data(), kBytes));
    ASSERT_OK(Finish(runtime, *second, "the second stream"));
    ASSERT_OK_AND_ASSIGN(bool done, written->Done());
    EXPECT_TRUE(done);
    EXPECT_EQ(out, data) << "round " << int{round};
  }
}

// Idle() says when everything queued so far has ended, with no event.
TEST_P(DeviceConformanceTest, AStreamIsIdleOnceItsWorkEnded) {
  RDMAFLOW_CREATE_OR_SKIP(runtime);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> stream, runtime.CreateStream());
  ASSERT_OK_AND_ASSIGN(bool idle, stream->Idle());
  EXPECT_TRUE(idle) << "a new stream has nothing to run";
  constexpr size_t kBytes = 4 << 20;
  ASSERT_OK_AND_ASSIGN(DeviceMemory chain, runtime.Allocate(kBytes * 8));
  auto* base = static_cast<std::byte*>(chain.data());
  const std::vector<uint8_t> data = Pattern(kBytes, 5);
  std::vector<uint8_t> out(kBytes);
  ASSERT_OK(stream->Copy(base, data.data(), kBytes));
  for (int i = 1; i < 8; ++i) {
    ASSERT_OK(stream->Copy(base + i * kBytes, base + (i - 1) * kBytes, kBytes));
  }
  ASSERT_OK(stream->Copy(out.data(), base + 7 * kBytes, kBytes));
  // (A copy into pageable memory may return only once it ran: the event
  // is what shows an Idle() that answers too soon.)
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Event> last, runtime.CreateEvent());
  ASSERT_OK(stream->Record(*last));
  ASSERT_OK_AND_ASSIGN(const bool ended,
                       PollUntil([&] { return stream->Idle(); }, absl::Now() + kTimeout));
  ASSERT_TRUE(ended) << "the stream's copies did not end within " << kTimeout;
  EXPECT_THAT(last->Done(), IsOkAndHolds(true)) << "idle before its last copy ended";
  EXPECT_EQ(out, data) << "idle before its last copy ended";
}

TEST_P(DeviceConformanceTest, AWrappedStreamIsTheSameQueue) {
  RDMAFLOW_CREATE_OR_SKIP(runtime);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> owner, runtime.CreateStream());
  constexpr size_t kBytes = 1 << 20;
  ASSERT_OK_AND_ASSIGN(DeviceMemory chain, runtime.Allocate(kBytes * 4));
  auto* base = static_cast<std::byte*>(chain.data());
  const std::vector<uint8_t> data = Pattern(kBytes, 9);
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> view,
                         runtime.WrapStream(owner->native_handle()));
    EXPECT_EQ(view->native_handle(), owner->native_handle());
    // Alternating between the two: right only if they are one queue.
    ASSERT_OK(owner->Copy(base, data.data(), kBytes));
    ASSERT_OK(view->Copy(base + kBytes, base, kBytes));
    ASSERT_OK(owner->Copy(base + 2 * kBytes, base + kBytes, kBytes));
    ASSERT_OK(view->Copy(base + 3 * kBytes, base + 2 * kBytes, kBytes));
    ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> last,
                         Download(runtime, *view, base + 3 * kBytes, kBytes));
    EXPECT_EQ(last, data);
  }
  // The view is gone, the stream it wrapped still works.
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> again, Download(runtime, *owner, base, kBytes));
  EXPECT_EQ(again, data);
}

TEST_P(DeviceConformanceTest, ReducesAgainstAFloat64Reference) {
  RDMAFLOW_CREATE_OR_SKIP(runtime);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> stream, runtime.CreateStream());
  using collectives::DataType;
  using collectives::ReduceOp;
  constexpr size_t kCount = 100003;  // not a multiple of any vector width
  constexpr int kSources = 3;
  for (DataType type : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(absl::StrCat(collectives::DataTypeName(type), " ",
                                  collectives::ReduceOpName(op), in_place ? " in place" : ""));
        const size_t element = collectives::ElementSize(type);
        std::vector<DeviceMemory> sources;
        std::vector<std::vector<double>> values(kSources, std::vector<double>(kCount));
        ReduceArgs args;
        args.type = type;
        args.op = op;
        args.count = kCount;
        for (int s = 0; s < kSources; ++s) {
          std::vector<uint8_t> host(kCount * element);
          for (size_t i = 0; i < kCount; ++i) {
            // Small integers and halves: exact in every type.
            const float v = static_cast<float>(static_cast<int>((i * 7 + s * 13) % 64) - 32) / 2;
            values[s][i] = v;
            if (type == DataType::kFloat32) {
              std::memcpy(host.data() + i * 4, &v, 4);
            } else {
              const uint16_t h = type == DataType::kFloat16 ? collectives::FloatToHalf(v)
                                                            : collectives::FloatToBFloat16(v);
              std::memcpy(host.data() + i * 2, &h, 2);
            }
          }
          ASSERT_OK_AND_ASSIGN(DeviceMemory source, runtime.Allocate(host.size()));
          ASSERT_OK(Upload(runtime, *stream, source.data(), host));
          args.srcs.push_back(source.data());
          sources.push_back(std::move(source));
        }
        DeviceMemory out_memory;
        if (in_place) {
          args.dst = sources[0].data();
        } else {
          ASSERT_OK_AND_ASSIGN(out_memory, runtime.Allocate(kCount * element));
          args.dst = out_memory.data();
        }
        ASSERT_OK(stream->Reduce(args));
        ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> out,
                             Download(runtime, *stream, args.dst, kCount * element));
        size_t wrong = 0;
        for (size_t i = 0; i < kCount; ++i) {
          double expected = values[0][i];
          for (int s = 1; s < kSources; ++s) {
            expected = op == ReduceOp::kSum ? expected + values[s][i]
                                            : std::max(expected, values[s][i]);
          }
          float got = 0;
          if (type == DataType::kFloat32) {
            std::memcpy(&got, out.data() + i * 4, 4);
          } else {
            uint16_t h;
            std::memcpy(&h, out.data() + i * 2, 2);
            got = type == DataType::kFloat16 ? collectives::HalfToFloat(h)
                                             : collectives::BFloat16ToFloat(h);
          }
          if (static_cast<double>(got) != expected) ++wrong;
        }
        EXPECT_EQ(wrong, 0u);
      }
    }
  }
}

TEST_P(DeviceConformanceTest, RefusesBadArguments) {
  RDMAFLOW_CREATE_OR_SKIP(runtime);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> stream, runtime.CreateStream());
  ASSERT_OK_AND_ASSIGN(DeviceMemory memory, runtime.Allocate(4096));
  ReduceArgs args;
  args.dst = memory.data();
  args.count = 16;
  EXPECT_THAT(stream->Reduce(args), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("0 sources")));
  args.srcs.assign(ReduceArgs::kMaxSources + 1, memory.data());
  EXPECT_THAT(stream->Reduce(args), StatusIs(absl::StatusCode::kInvalidArgument));
  args.srcs.assign(2, memory.data());
  args.type = collectives::DataType::kInt32;
  EXPECT_THAT(stream->Reduce(args), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("int32")));
  args.type = collectives::DataType::kFloat32;
  args.op = collectives::ReduceOp::kProduct;
  EXPECT_THAT(stream->Reduce(args), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(stream->Copy(nullptr, memory.data(), 8),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // An event of another runtime instance.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceRuntime> other, GetParam().create());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Event> foreign, other->CreateEvent());
  if (other.get() != &runtime) {
    EXPECT_THAT(stream->Record(*foreign), StatusIs(absl::StatusCode::kInvalidArgument));
  }
  // Exporting what is not an allocation's base; opening garbage or our own.
  EXPECT_THAT(runtime.ExportIpc(static_cast<std::byte*>(memory.data()) + 64), Not(IsOk()));
  IpcHandle garbage;
  garbage.bytes.fill(0xab);
  EXPECT_THAT(runtime.OpenIpc(garbage), Not(IsOk()));
  ASSERT_OK_AND_ASSIGN(IpcHandle own, runtime.ExportIpc(memory.data()));
  EXPECT_THAT(runtime.OpenIpc(own), Not(IsOk()));
}

// The dma-buf export GPUDirect RDMA registers (rdma/ibverbs): refusals
// everywhere; the export itself where the driver and device offer one.
TEST_P(DeviceConformanceTest, ExportsRangesAsDmaBufs) {
  RDMAFLOW_CREATE_OR_SKIP(runtime);
  constexpr size_t kBytes = 4 << 20;
  ASSERT_OK_AND_ASSIGN(DeviceMemory memory, runtime.Allocate(kBytes));
  auto* start = static_cast<std::byte*>(memory.data());
  std::vector<uint8_t> host(8192);
  EXPECT_THAT(runtime.ExportDmaBuf(host.data(), host.size()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(runtime.ExportDmaBuf(start + kBytes - 100, 101),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dma-buf")));
  EXPECT_THAT(runtime.ExportDmaBuf(start, 0), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(runtime.ExportDmaBuf(nullptr, 64), StatusIs(absl::StatusCode::kInvalidArgument));

  std::byte* inside = start + (1 << 20) + 100;
  absl::StatusOr<DmaBuf> exported = runtime.ExportDmaBuf(inside, 8192);
  if (absl::IsUnimplemented(exported.status())) {
    GTEST_SKIP() << "no dma-buf export here: " << exported.status().message();
  }
  ASSERT_OK(exported.status());
  EXPECT_GE(exported->fd.get(), 0);
  EXPECT_EQ(exported->size, 8192u);
  // The dma-buf starts on a page boundary, at or before the range.
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  EXPECT_EQ((reinterpret_cast<uintptr_t>(inside) - exported->offset) % page, 0u);
  EXPECT_LE(exported->offset, static_cast<uint64_t>(inside - start));
}

TEST_P(DeviceConformanceTest, IpcBetweenTwoProcesses) {
  RDMAFLOW_CREATE_OR_SKIP(runtime);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> stream, runtime.CreateStream());
  constexpr size_t kBytes = (2 << 20) + 5;
  ASSERT_OK_AND_ASSIGN(DeviceMemory memory, runtime.Allocate(kBytes));
  ASSERT_OK(Upload(runtime, *stream, memory.data(), Pattern(kBytes, 7)));
  ASSERT_OK_AND_ASSIGN(IpcHandle handle, runtime.ExportIpc(memory.data()));
  ASSERT_EQ(RunPeer(GetParam(), handle), 0) << "the peer process failed (its stderr says why)";
  // What the peer wrote through its mapping is here.
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> now,
                       Download(runtime, *stream, memory.data(), kBytes));
  EXPECT_EQ(now, Pattern(kBytes, 9));
}

}  // namespace

std::string DeviceBackendName(const ::testing::TestParamInfo<DeviceBackend>& info) {
  return info.param.name;
}

int RunDeviceConformanceMain(int argc, char** argv, const std::vector<DeviceBackend>& backends) {
  if (const char* child = std::getenv(kChildEnv)) {
    const char* handle = std::getenv(kHandleEnv);
    if (handle == nullptr) return 126;
    for (const DeviceBackend& backend : backends) {
      if (backend.name == child) return RunChild(backend, handle);
    }
    return 126;
  }
  ::testing::InitGoogleMock(&argc, argv);
  return RUN_ALL_TESTS();
}

}  // namespace rdmaflow::device::testing
