// What only the fake device does: injected faults (a copy's, a Record's),
// a slow device against deadlines, its capacity, and forged or racing IPC
// handles.
#include "device/fake/fake_device.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/poll_until.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::device {
namespace {

using ::rdmaflow::testing::IsOk;
using ::rdmaflow::testing::IsOkAndHolds;
using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

std::unique_ptr<FakeDevice> MakeDevice(const FakeDeviceOptions& options = {}) {
  absl::StatusOr<std::unique_ptr<FakeDevice>> device = FakeDevice::Create(options);
  EXPECT_THAT(device, IsOk());
  return device.ok() ? *std::move(device) : nullptr;
}

// A fake dma-buf maps to the allocation itself: what a NIC registering it
// would reach is the range's bytes.
TEST(FakeDeviceTest, ADmaBufMapsTheExportedRange) {
  std::unique_ptr<FakeDevice> device = MakeDevice();
  constexpr size_t kBytes = 3 << 20;
  ASSERT_OK_AND_ASSIGN(DeviceMemory memory, device->Allocate(kBytes));
  auto* bytes = static_cast<uint8_t*>(memory.data());
  for (size_t i = 0; i < kBytes; ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 3);
  constexpr size_t kAt = (1 << 20) + 12345;
  ASSERT_OK_AND_ASSIGN(DmaBuf exported, device->ExportDmaBuf(bytes + kAt, 5000));
  EXPECT_EQ(exported.offset, kAt);
  EXPECT_EQ(exported.size, 5000u);
  void* view = mmap(nullptr, kBytes, PROT_READ, MAP_SHARED, exported.fd.get(), 0);
  ASSERT_NE(view, MAP_FAILED) << std::strerror(errno);
  const auto* seen = static_cast<const uint8_t*>(view) + exported.offset;
  size_t wrong = 0;
  for (size_t i = 0; i < exported.size; ++i) wrong += seen[i] != bytes[kAt + i];
  EXPECT_EQ(wrong, 0u);
  munmap(view, kBytes);
}

TEST(FakeDeviceTest, AnInjectedFaultBreaksItsStreamForGood) {
  FakeDeviceOptions options;
  options.fail_operation = 2;
  options.fault = absl::DataLossError("ECC error (injected)");
  std::unique_ptr<FakeDevice> device = MakeDevice(options);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> stream, device->CreateStream());
  ASSERT_OK_AND_ASSIGN(DeviceMemory memory, device->Allocate(4096));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Event> before, device->CreateEvent());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Event> after, device->CreateEvent());
  std::vector<char> host(4096, 'x');
  ASSERT_OK(stream->Copy(memory.data(), host.data(), 4096));  // operation 1: fine
  ASSERT_OK(stream->Record(*before));
  ASSERT_OK(stream->Copy(host.data(), memory.data(), 4096));  // operation 2: fails
  ASSERT_OK(stream->Copy(memory.data(), host.data(), 4096));  // after the failure
  ASSERT_OK(stream->Record(*after));
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  EXPECT_THAT(before->WaitUntil(deadline, "the first copy"), IsOk());
  EXPECT_THAT(after->WaitUntil(deadline, "the later copies"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("ECC")));
  // Sticky: a stream that waits on the broken one breaks too, and an event
  // recorded later still reports it.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> other, device->CreateStream());
  ASSERT_OK(other->WaitFor(*after));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Event> downstream, device->CreateEvent());
  ASSERT_OK(other->Record(*downstream));
  EXPECT_THAT(downstream->WaitUntil(deadline, "the waiting stream"),
              StatusIs(absl::StatusCode::kDataLoss));
  ASSERT_OK(stream->Record(*after));
  EXPECT_THAT(after->Done(), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(stream->Idle(), StatusIs(absl::StatusCode::kDataLoss));
  // Nothing queued behind the failure ran, on either stream: destroyed, a
  // stream has finished its queue.
  std::vector<char> later(4096, 'y');
  ASSERT_OK(stream->Copy(memory.data(), later.data(), 4096));
  ASSERT_OK(other->Copy(memory.data(), later.data(), 4096));
  stream.reset();
  other.reset();
  std::vector<char> now(4096);
  std::memcpy(now.data(), memory.data(), 4096);
  EXPECT_EQ(std::count(now.begin(), now.end(), 'x'), 4096)
      << "a copy queued behind the failure wrote into device memory";
}

// A refused launch: the call fails, nothing of it runs, and the stream runs
// on (what was queued before and after it), unlike a fault when it runs.
TEST(FakeDeviceTest, ARefusedOperationQueuesNothingAndLeavesItsStreamWhole) {
  FakeDeviceOptions options;
  options.refuse_operation = 2;
  options.fault = absl::ResourceExhaustedError("too many resources requested (injected)");
  std::unique_ptr<FakeDevice> device = MakeDevice(options);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> stream, device->CreateStream());
  ASSERT_OK_AND_ASSIGN(DeviceMemory memory, device->Allocate(64));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Event> done, device->CreateEvent());
  const std::vector<float> ones(16, 1.0f);
  ASSERT_OK(stream->Copy(memory.data(), ones.data(), 64));  // operation 1
  ReduceArgs sum;
  sum.type = collectives::DataType::kFloat32;
  sum.op = collectives::ReduceOp::kSum;
  sum.dst = memory.data();
  sum.srcs = {memory.data(), memory.data()};
  sum.count = 16;
  EXPECT_THAT(stream->Reduce(sum), StatusIs(absl::StatusCode::kResourceExhausted,
                                            HasSubstr("injected")));  // operation 2
  std::vector<float> back(16);
  ASSERT_OK(stream->Copy(back.data(), memory.data(), 64));  // operation 3
  ASSERT_OK(stream->Record(*done));
  EXPECT_OK(done->WaitUntil(absl::Now() + absl::Seconds(30), "the copies around it"));
  EXPECT_EQ(back, ones) << "the refused reduction ran";
  EXPECT_THAT(stream->Idle(), IsOkAndHolds(true));
}

TEST(FakeDeviceTest, AWaitOnASlowDeviceEndsAtItsDeadline) {
  FakeDeviceOptions options;
  options.operation_delay = absl::Milliseconds(500);
  std::unique_ptr<FakeDevice> device = MakeDevice(options);
  std::vector<char> host(64);  // outlives the stream's pending copy
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> stream, device->CreateStream());
  ASSERT_OK_AND_ASSIGN(DeviceMemory memory, device->Allocate(64));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Event> done, device->CreateEvent());
  ASSERT_OK(stream->Copy(memory.data(), host.data(), 64));
  ASSERT_OK(stream->Record(*done));
  ASSERT_OK_AND_ASSIGN(bool finished, done->Done());
  EXPECT_FALSE(finished);
  EXPECT_THAT(done->WaitUntil(absl::Now() + absl::Milliseconds(20), "the slow copy"),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("the slow copy")));
  // Freeing the memory, then destroying the stream, finish the copy first,
  // as cudaFree and cudaStreamDestroy do.
}

// A paused device starts nothing until it resumes: a copy stays queued
// however long the test takes to look.
TEST(FakeDeviceTest, APausedDeviceRunsNothingUntilItResumes) {
  std::unique_ptr<FakeDevice> device = MakeDevice(FakeDeviceOptions{});
  std::vector<char> host(64, 7);  // outlives the stream's pending copy
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> stream, device->CreateStream());
  ASSERT_OK_AND_ASSIGN(DeviceMemory memory, device->Allocate(64));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Event> done, device->CreateEvent());
  // Nothing fails while paused, so that the device always resumes.
  device->Pause();
  absl::Status queued = stream->Copy(memory.data(), host.data(), 64);
  if (queued.ok()) queued = stream->Record(*done);
  const absl::Status waited =
      queued.ok() ? done->WaitUntil(absl::Now() + absl::Milliseconds(20), "the paused copy")
                  : queued;
  const auto first = static_cast<unsigned char>(static_cast<char*>(memory.data())[0]);
  device->Resume();
  ASSERT_OK(queued);
  EXPECT_THAT(waited,
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("the paused copy")));
  EXPECT_EQ(first, FakeDevice::kFreshByte);
  ASSERT_OK(done->WaitUntil(absl::Now() + absl::Seconds(30), "the resumed copy"));
  EXPECT_EQ(static_cast<char*>(memory.data())[63], 7);
}

// A Record that fails marks nothing, and what was queued before it still
// runs: only Idle() says when it ended.
TEST(FakeDeviceTest, AFailedRecordMarksNothingAndTheStreamRunsOn) {
  FakeDeviceOptions options;
  options.fault = absl::InternalError("cudaEventRecord (injected)");
  std::unique_ptr<FakeDevice> device = MakeDevice(options);
  std::vector<char> host(64, 'z');  // outlives the stream's pending copy
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> stream, device->CreateStream());
  ASSERT_OK_AND_ASSIGN(DeviceMemory memory, device->Allocate(64));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Event> done, device->CreateEvent());
  ASSERT_OK(stream->Record(*done));  // before any work
  // Nothing fails while paused, so that the device always resumes.
  device->Pause();
  const absl::Status queued = stream->Copy(memory.data(), host.data(), 64);
  device->FailRecords(1);
  const absl::Status recorded = stream->Record(*done);
  const absl::StatusOr<bool> marked = done->Done();
  const absl::StatusOr<bool> idle = stream->Idle();
  device->Resume();
  ASSERT_OK(queued);
  EXPECT_THAT(recorded, StatusIs(absl::StatusCode::kInternal, HasSubstr("injected")));
  EXPECT_THAT(marked, IsOkAndHolds(true)) << "the failed Record moved the event";
  EXPECT_THAT(idle, IsOkAndHolds(false)) << "idle with a copy still queued";
  ASSERT_OK_AND_ASSIGN(const bool ended,
                       PollUntil([&] { return stream->Idle(); }, absl::Now() + absl::Seconds(30)));
  ASSERT_TRUE(ended);
  EXPECT_EQ(static_cast<char*>(memory.data())[63], 'z') << "the copy did not run";
  EXPECT_OK(stream->Record(*done)) << "FailRecords(1) failed more than one Record";
}

TEST(FakeDeviceTest, OnlyALiveStreamOfThisDeviceWraps) {
  std::unique_ptr<FakeDevice> device = MakeDevice();
  std::unique_ptr<FakeDevice> other = MakeDevice();
  ASSERT_NE(device, nullptr);
  ASSERT_NE(other, nullptr);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> stream, other->CreateStream());
  EXPECT_THAT(device->WrapStream(stream->native_handle()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a live stream")));
  int not_a_stream = 0;
  EXPECT_THAT(device->WrapStream(&not_a_stream),
              StatusIs(absl::StatusCode::kInvalidArgument));
  void* gone = stream->native_handle();
  stream.reset();
  EXPECT_THAT(other->WrapStream(gone), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(FakeDeviceTest, CapacityAndBounds) {
  FakeDeviceOptions options;
  options.capacity_bytes = 1 << 20;
  std::unique_ptr<FakeDevice> device = MakeDevice(options);
  ASSERT_OK_AND_ASSIGN(DeviceMemory a, device->Allocate(768 << 10));
  EXPECT_THAT(device->Allocate(512 << 10),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("in use")));
  {
    ASSERT_OK_AND_ASSIGN(DeviceMemory b, device->Allocate(256 << 10));
  }
  ASSERT_OK_AND_ASSIGN(DeviceMemory c, device->Allocate(256 << 10));  // b's bytes came back
  // Fresh memory holds garbage, as cudaMalloc's may, never zeros.
  const auto* fresh = static_cast<const unsigned char*>(c.data());
  EXPECT_EQ(std::count(fresh, fresh + (256 << 10), FakeDevice::kFreshByte), 256 << 10);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> stream, device->CreateStream());
  std::vector<char> host(4096);
  EXPECT_THAT(stream->Copy(static_cast<char*>(c.data()) + (256 << 10) - 100, host.data(), 101),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("past the end")));
  EXPECT_THAT(stream->Zero(static_cast<char*>(c.data()) + (256 << 10) - 100, 101),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("past the end")));
  // Pinning: overlaps refused, device memory refused.
  ASSERT_OK(device->PinHost(host.data() + 100, 1000));
  EXPECT_THAT(device->PinHost(host.data(), 101), Not(IsOk()));
  EXPECT_THAT(device->PinHost(host.data() + 1099, 10), Not(IsOk()));
  ASSERT_OK(device->PinHost(host.data() + 1100, 10));
  EXPECT_THAT(device->PinHost(a.data(), 10), Not(IsOk()));
  EXPECT_THAT(FakeDevice::Create(FakeDeviceOptions{-1}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// Memory mapped a piece at a time (as torch's expandable segments map
// theirs): Query reports the piece that holds the pointer, the last one
// short; a copy still spans pieces.
TEST(FakeDeviceTest, QueryReportsThePieceThatHoldsAPointer) {
  FakeDeviceOptions options;
  options.query_piece_bytes = 4096;
  std::unique_ptr<FakeDevice> device = MakeDevice(options);
  constexpr size_t kBytes = 3 * 4096 + 100;
  ASSERT_OK_AND_ASSIGN(DeviceMemory memory, device->Allocate(kBytes));
  auto* data = static_cast<std::byte*>(memory.data());
  ASSERT_OK_AND_ASSIGN(PointerInfo first, device->Query(data + 10));
  EXPECT_EQ(first.base, data);
  EXPECT_EQ(first.size, 4096u);
  ASSERT_OK_AND_ASSIGN(PointerInfo second, device->Query(data + 4096));
  EXPECT_EQ(second.base, data + 4096);
  EXPECT_EQ(second.size, 4096u);
  ASSERT_OK_AND_ASSIGN(PointerInfo last, device->Query(data + kBytes - 1));
  EXPECT_EQ(last.base, data + 3 * 4096);
  EXPECT_EQ(last.size, 100u);
  // Only the allocation's base exports.
  EXPECT_THAT(device->ExportIpc(second.base), StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Stream> stream, device->CreateStream());
  std::vector<char> host(kBytes, 7);
  ASSERT_OK(stream->Copy(data, host.data(), kBytes));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Event> copied, device->CreateEvent());
  ASSERT_OK(stream->Record(*copied));
  ASSERT_OK(copied->WaitUntil(absl::Now() + absl::Seconds(10), "a copy across pieces"));
  EXPECT_EQ(std::count(data, data + kBytes, std::byte{7}), static_cast<long>(kBytes));
}

// A handle as another process would export it, forged field by field.
TEST(FakeDeviceTest, ForgedHandlesAreRefusedByName) {
  std::unique_ptr<FakeDevice> device = MakeDevice();
  ASSERT_OK_AND_ASSIGN(DeviceMemory memory, device->Allocate(4096));
  ASSERT_OK_AND_ASSIGN(IpcHandle real, device->ExportIpc(memory.data()));
  auto with_pid = [](IpcHandle handle, int32_t pid) {
    std::memcpy(handle.bytes.data() + 8, &pid, sizeof(pid));
    return handle;
  };
  const int32_t other_pid = getpid() + 1;
  // Our own allocation through a handle claiming another process: the name
  // exists, so only the size check stands between it and a mapping.
  IpcHandle wrong_size = with_pid(real, other_pid);
  const uint64_t size = 1 << 30;
  std::memcpy(wrong_size.bytes.data() + 16, &size, sizeof(size));
  EXPECT_THAT(device->OpenIpc(wrong_size),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not the size")));
  IpcHandle bad_magic = with_pid(real, other_pid);
  bad_magic.bytes[0] ^= 1;
  EXPECT_THAT(device->OpenIpc(bad_magic),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("magic")));
  IpcHandle unterminated = with_pid(real, other_pid);
  std::memset(unterminated.bytes.data() + 24, 'a', IpcHandle::kBytes - 24);
  EXPECT_THAT(device->OpenIpc(unterminated),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("malformed")));
  IpcHandle escaping = with_pid(real, other_pid);
  std::memset(escaping.bytes.data() + 24, 0, IpcHandle::kBytes - 24);
  std::memcpy(escaping.bytes.data() + 24, "/rdmaflow-fake-/../x", 20);
  EXPECT_THAT(device->OpenIpc(escaping),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("malformed")));
  IpcHandle gone = with_pid(real, other_pid);
  std::memset(gone.bytes.data() + 24, 0, IpcHandle::kBytes - 24);
  std::memcpy(gone.bytes.data() + 24, "/rdmaflow-fake-0-0-0", 20);
  EXPECT_THAT(device->OpenIpc(gone), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("gone")));
  EXPECT_THAT(device->OpenIpc(real),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("exported it")));
}

// A peer rewrites the handle's bytes while it is being opened: whatever
// the bytes were, the call ends with a mapping of the right size or an
// error, never a crash or a mapping of another size.
TEST(FakeDeviceTest, AHandleRewrittenWhileOpening) {
  std::unique_ptr<FakeDevice> device = MakeDevice();
  ASSERT_OK_AND_ASSIGN(DeviceMemory memory, device->Allocate(4096));
  ASSERT_OK_AND_ASSIGN(IpcHandle real, device->ExportIpc(memory.data()));
  const int32_t other_pid = getpid() + 1;
  std::memcpy(real.bytes.data() + 8, &other_pid, sizeof(other_pid));
  IpcHandle shared = real;
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    uint8_t salt = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      volatile uint8_t* bytes = shared.bytes.data();
      for (size_t i = 8; i < IpcHandle::kBytes; ++i) bytes[i] = static_cast<uint8_t>(salt + i);
      for (size_t i = 8; i < IpcHandle::kBytes; ++i) bytes[i] = real.bytes[i];
      ++salt;
    }
  });
  int opened = 0;
  for (int i = 0; i < 2000; ++i) {
    absl::StatusOr<DeviceMemory> mapped = device->OpenIpc(shared);
    if (mapped.ok()) {
      EXPECT_EQ(mapped->size(), 4096u);
      ++opened;
    }
  }
  stop = true;
  writer.join();
  std::printf("%d of 2000 opens saw a whole handle\n", opened);
}

// Freeing an allocation an importer still has open is undefined with CUDA:
// the fake counts it, and not once the importer has closed its mapping or
// ended. (A handle opens here with another process's pid written in, as
// above: the fake tells processes apart by their locks, not their pids.)
IpcHandle AsIfFromAnotherProcess(IpcHandle handle) {
  const int32_t other_pid = getpid() + 1;
  std::memcpy(handle.bytes.data() + 8, &other_pid, sizeof(other_pid));
  return handle;
}

TEST(FakeDeviceTest, FreeingWhatAnImporterHasOpenIsCounted) {
  std::unique_ptr<FakeDevice> device = MakeDevice();
  const int64_t before = FakeDevice::frees_while_open();
  {
    ASSERT_OK_AND_ASSIGN(DeviceMemory memory, device->Allocate(4096));
    ASSERT_OK_AND_ASSIGN(IpcHandle handle, device->ExportIpc(memory.data()));
    ASSERT_OK_AND_ASSIGN(DeviceMemory mapped, device->OpenIpc(AsIfFromAnotherProcess(handle)));
    memory = DeviceMemory();  // freed while `mapped` is open
    EXPECT_EQ(FakeDevice::frees_while_open(), before + 1);
  }
  // Closed first, then freed: nothing to count.
  ASSERT_OK_AND_ASSIGN(DeviceMemory memory, device->Allocate(4096));
  ASSERT_OK_AND_ASSIGN(IpcHandle handle, device->ExportIpc(memory.data()));
  {
    ASSERT_OK_AND_ASSIGN(DeviceMemory mapped, device->OpenIpc(AsIfFromAnotherProcess(handle)));
  }
  memory = DeviceMemory();
  EXPECT_EQ(FakeDevice::frees_while_open(), before + 1);
}

TEST(FakeDeviceTest, AnImporterThatEndedHoldsNothingOpen) {
  std::unique_ptr<FakeDevice> device = MakeDevice();
  const int64_t before = FakeDevice::frees_while_open();
  ASSERT_OK_AND_ASSIGN(DeviceMemory memory, device->Allocate(4096));
  ASSERT_OK_AND_ASSIGN(IpcHandle handle, device->ExportIpc(memory.data()));
  const pid_t child = fork();
  ASSERT_GE(child, 0) << std::strerror(errno);
  if (child == 0) {
    // Opens the allocation and ends without closing it, as a process that
    // dies does: exit status 0 only if the open worked.
    absl::StatusOr<std::unique_ptr<FakeDevice>> own = FakeDevice::Create({});
    if (!own.ok()) _exit(2);
    absl::StatusOr<DeviceMemory> mapped = (*own)->OpenIpc(handle);
    _exit(mapped.ok() && mapped->size() == 4096 ? 0 : 3);
  }
  int status = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (waitpid(child, &status, WNOHANG) == 0) {
    if (absl::Now() > deadline) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      FAIL() << "the importer did not end";
    }
    std::this_thread::yield();
  }
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  memory = DeviceMemory();
  EXPECT_EQ(FakeDevice::frees_while_open(), before);
}

// Memory the program never freed goes with its runtime (CUDA's with the
// process): that is no free the program made, so it is not counted though
// an importer still has it open, and the importer's mapping keeps its
// bytes.
TEST(FakeDeviceTest, MemoryThatOutlivesItsRuntimeIsNoFreeOfTheProgram) {
  const int64_t before = FakeDevice::frees_while_open();
  std::unique_ptr<FakeDevice> importer = MakeDevice();
  std::unique_ptr<FakeDevice> exporter = MakeDevice();
  ASSERT_OK_AND_ASSIGN(DeviceMemory memory, exporter->Allocate(4096));
  std::memset(memory.data(), 0x5A, memory.size());
  ASSERT_OK_AND_ASSIGN(IpcHandle handle, exporter->ExportIpc(memory.data()));
  ASSERT_OK_AND_ASSIGN(DeviceMemory mapped,
                       importer->OpenIpc(AsIfFromAnotherProcess(handle)));
  // Never destroyed (as a DeviceTransport's region a failed teardown keeps).
  alignas(DeviceMemory) unsigned char kept[sizeof(DeviceMemory)];
  new (kept) DeviceMemory(std::move(memory));
  exporter.reset();
  EXPECT_EQ(FakeDevice::frees_while_open(), before);
  EXPECT_EQ(static_cast<const unsigned char*>(mapped.data())[4095], 0x5A);
}

}  // namespace
}  // namespace rdmaflow::device
