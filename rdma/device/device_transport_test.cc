// The device path between two processes: each a DeviceTransport over the
// fake device (device/fake, whose IPC crosses processes as CUDA's does and
// refuses to open a handle in its own process, as CUDA does) and UCX over
// shared memory. The test process is rank 0 and posts; it starts rank 1 as
// this same binary (RDMAFLOW_DEVICE_PEER_FD set), which holds a device
// region and a host region, answers commands over a socket pair and keeps
// its transport progressing in between.
#include "rdma/device/device_transport.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "device/fake/fake_device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rdma/blocking.h"
#include "rdma/builtin_transports.h"
#include "rdma/device/device_key.pb.h"
#include "rdma/testing/transport_wrapper.h"

namespace rdmaflow::rdma::device_path {
namespace {

using ::rdmaflow::testing::IsOk;
using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kPeerEnv[] = "RDMAFLOW_DEVICE_PEER_FD";
// Set: rank 1 claims another host, so rank 0's writes into its device
// memory are staged (small slots, so that they are reused many times), and
// its fake device is slow.
constexpr char kStagedEnv[] = "RDMAFLOW_DEVICE_PEER_STAGED";
constexpr absl::Duration kTimeout = absl::Seconds(30);
constexpr size_t kDeviceBytes = 4 << 20;  // rank 1's device region
constexpr size_t kHostBytes = 1 << 20;    // rank 1's host region

// The check word of a key changed by hand, as a forger would compute it.
uint64_t Reseal(const DeviceKeyProto& key) {
  return KeyCheck(key.host(), key.device(), key.ipc_handle(), key.offset(),
                  key.allocation_size());
}

uint8_t Pattern(size_t i, uint8_t salt) { return static_cast<uint8_t>(i * 131 + salt * 17 + 1); }

// Length-prefixed messages over a socket, each wait bounded.
class Link {
 public:
  explicit Link(int fd) : fd_(fd) {}
  ~Link() { close(fd_); }

  absl::Status Send(const std::string& message) {
    const uint32_t size = message.size();
    std::string frame(reinterpret_cast<const char*>(&size), sizeof(size));
    frame += message;
    const char* at = frame.data();
    size_t left = frame.size();
    while (left > 0) {
      const ssize_t n = send(fd_, at, left, MSG_NOSIGNAL);
      if (n <= 0) return absl::UnavailableError("the other rank hung up");
      at += n;
      left -= static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

  // True when a message is waiting (after at most `wait`).
  bool Ready(absl::Duration wait) {
    pollfd p{fd_, POLLIN, 0};
    return poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(wait))) > 0;
  }

  absl::StatusOr<std::string> Receive() {
    uint32_t size = 0;
    RETURN_IF_ERROR(ReadAll(&size, sizeof(size)));
    if (size > (64u << 20)) return absl::InvalidArgumentError("an oversized message");
    std::string message(size, '\0');
    RETURN_IF_ERROR(ReadAll(message.data(), size));
    return message;
  }

 private:
  absl::Status ReadAll(void* data, size_t bytes) {
    auto* at = static_cast<char*>(data);
    const absl::Time deadline = absl::Now() + kTimeout;
    while (bytes > 0) {
      if (absl::Now() > deadline) return absl::DeadlineExceededError("the other rank is silent");
      if (!Ready(absl::Milliseconds(100))) continue;
      const ssize_t n = recv(fd_, at, bytes, 0);
      if (n <= 0) return absl::UnavailableError("the other rank hung up");
      at += n;
      bytes -= static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

  const int fd_;
};

// The staged tests' options: rank 1 on "another-host".
DeviceTransportOptions StagedOptions(bool other_host) {
  DeviceTransportOptions options;
  if (other_host) options.host_identity = "another-host";
  options.staging.slots = 2;
  options.staging.slot_bytes = 64 << 10;
  return options;
}

device::FakeDeviceOptions SlowDevice() {
  device::FakeDeviceOptions options;
  options.operation_delay = absl::Microseconds(500);
  return options;
}

// A host transport that notes the last wait it was asked for.
class WaitRecorder : public rdma::testing::TransportWrapper {
 public:
  explicit WaitRecorder(std::unique_ptr<Transport> inner)
      : TransportWrapper(*inner), owned_(std::move(inner)) {}
  bool WaitForActivity(absl::Duration timeout) override {
    last_wait_ = timeout;
    return TransportWrapper::WaitForActivity(timeout);
  }
  absl::Duration last_wait() const { return last_wait_; }

 private:
  std::unique_ptr<Transport> owned_;
  absl::Duration last_wait_ = absl::ZeroDuration();
};

// A DeviceTransport over `device` and UCX on shared memory; `waits`, when
// given, is set to the host transport, which notes its waits.
absl::StatusOr<std::unique_ptr<DeviceTransport>> MakeTransport(
    device::DeviceRuntime* device, int rank, const DeviceTransportOptions& options = {},
    WaitRecorder** waits = nullptr) {
  ASSIGN_OR_RETURN(std::unique_ptr<Transport> host, CreateBuiltinTransport("ucx", "tls=shm", rank));
  auto recorder = std::make_unique<WaitRecorder>(std::move(host));
  if (waits != nullptr) *waits = recorder.get();
  return DeviceTransport::Create(std::move(recorder), device, options);
}

absl::Status Finish(device::DeviceRuntime& device, device::Stream& stream) {
  ASSIGN_OR_RETURN(std::unique_ptr<device::Event> done, device.CreateEvent());
  RETURN_IF_ERROR(stream.Record(*done));
  return done->WaitUntil(absl::Now() + kTimeout, "a test copy");
}

absl::Status Fill(device::DeviceRuntime& device, void* at, size_t bytes, uint8_t salt) {
  std::vector<uint8_t> host(bytes);
  for (size_t i = 0; i < bytes; ++i) host[i] = Pattern(i, salt);
  ASSIGN_OR_RETURN(std::unique_ptr<device::Stream> stream, device.CreateStream());
  RETURN_IF_ERROR(stream->Copy(at, host.data(), bytes));
  return Finish(device, *stream);
}

absl::StatusOr<std::string> Download(device::DeviceRuntime& device, const void* at,
                                     size_t bytes) {
  std::string out(bytes, '\0');
  ASSIGN_OR_RETURN(std::unique_ptr<device::Stream> stream, device.CreateStream());
  RETURN_IF_ERROR(stream->Copy(out.data(), at, bytes));
  RETURN_IF_ERROR(Finish(device, *stream));
  return out;
}

// Rank 1: publish, then answer commands until "quit":
//   "notes N"           the values of the next N notifications, in order
//   "device OFF LEN"    bytes [OFF, OFF + LEN) of its device region
//   "host OFF LEN"      the same of its host region
//   "fill SALT"         its device region filled with pattern SALT
//   "answered"          bytes it staged so far to answer staged reads
absl::Status RunPeer(int fd) {
  Link link(fd);
  const bool staged = std::getenv(kStagedEnv) != nullptr;
  ASSIGN_OR_RETURN(std::unique_ptr<device::FakeDevice> fake,
                   device::FakeDevice::Create(staged ? SlowDevice() : device::FakeDeviceOptions{}));
  ASSIGN_OR_RETURN(std::unique_ptr<DeviceTransport> transport,
                   MakeTransport(fake.get(), 1, staged ? StagedOptions(true) : DeviceTransportOptions{}));
  ASSIGN_OR_RETURN(MemoryRegion on_device, transport->AllocateDevice(kDeviceBytes));
  ASSIGN_OR_RETURN(MemoryRegion on_host, transport->Allocate(kHostBytes));
  RETURN_IF_ERROR(link.Send(transport->address()));
  RETURN_IF_ERROR(link.Send(on_device.descriptor().Serialize()));
  RETURN_IF_ERROR(link.Send(on_host.descriptor().Serialize()));
  ASSIGN_OR_RETURN(std::string address, link.Receive());
  ASSIGN_OR_RETURN(std::unique_ptr<Endpoint> endpoint, transport->Connect({0, address}));
  while (true) {
    RETURN_IF_ERROR(transport->Progress().status());
    if (!link.Ready(absl::ZeroDuration())) continue;
    ASSIGN_OR_RETURN(std::string command, link.Receive());
    std::vector<std::string> words = absl::StrSplit(command, ' ');
    if (words[0] == "quit") return absl::OkStatus();
    if (words[0] == "notes" && words.size() == 2) {
      int count = 0;
      if (!absl::SimpleAtoi(words[1], &count)) return absl::InvalidArgumentError(command);
      std::vector<uint32_t> values;
      for (int i = 0; i < count; ++i) {
        ASSIGN_OR_RETURN(Notification note,
                         WaitNotification(*transport, absl::Now() + kTimeout));
        values.push_back(note.value);
      }
      RETURN_IF_ERROR(link.Send(absl::StrJoin(values, ",")));
    } else if ((words[0] == "device" || words[0] == "host") && words.size() == 3) {
      size_t offset = 0, length = 0;
      if (!absl::SimpleAtoi(words[1], &offset) || !absl::SimpleAtoi(words[2], &length)) {
        return absl::InvalidArgumentError(command);
      }
      if (words[0] == "device") {
        ASSIGN_OR_RETURN(std::string bytes, Download(*fake, on_device.data() + offset, length));
        RETURN_IF_ERROR(link.Send(bytes));
      } else {
        RETURN_IF_ERROR(link.Send(
            std::string(reinterpret_cast<const char*>(on_host.data()) + offset, length)));
      }
    } else if (words[0] == "answered" && words.size() == 1) {
      RETURN_IF_ERROR(link.Send(absl::StrCat(transport->staged_answer_bytes())));
    } else if (words[0] == "fill" && words.size() == 2) {
      int salt = 0;
      if (!absl::SimpleAtoi(words[1], &salt)) return absl::InvalidArgumentError(command);
      RETURN_IF_ERROR(Fill(*fake, on_device.data(), kDeviceBytes, static_cast<uint8_t>(salt)));
      RETURN_IF_ERROR(link.Send("ok"));
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown command '", command, "'"));
    }
  }
}

// Rank 0's side of a test: rank 1 started and connected.
class DeviceTransportTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(staged() ? SlowDevice() : device::FakeDeviceOptions{}); }
  // Whether rank 1 is on "another host".
  virtual bool staged() const { return false; }

  void Start(const device::FakeDeviceOptions& options) {
    int pair[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
    peer_ = fork();
    ASSERT_GE(peer_, 0);
    if (peer_ == 0) {
      close(pair[0]);
      setenv(kPeerEnv, std::to_string(pair[1]).c_str(), 1);
      if (staged()) setenv(kStagedEnv, "1", 1);
      execl("/proc/self/exe", "device_transport_peer", nullptr);
      _exit(127);
    }
    close(pair[1]);
    link_ = std::make_unique<Link>(pair[0]);
    ASSERT_OK_AND_ASSIGN(device_, device::FakeDevice::Create(options));
    ASSERT_OK_AND_ASSIGN(transport_, MakeTransport(device_.get(), 0,
                                                   staged() ? StagedOptions(false)
                                                            : DeviceTransportOptions{},
                                                   &waits_));
    ASSERT_OK_AND_ASSIGN(peer_address_, link_->Receive());
    ASSERT_OK_AND_ASSIGN(std::string on_device, link_->Receive());
    ASSERT_OK_AND_ASSIGN(std::string on_host, link_->Receive());
    ASSERT_OK_AND_ASSIGN(peer_device_, RemoteRegion::Parse(on_device));
    ASSERT_OK_AND_ASSIGN(peer_host_, RemoteRegion::Parse(on_host));
    ASSERT_OK(link_->Send(transport_->address()));
    ASSERT_OK_AND_ASSIGN(endpoint_, transport_->Connect({1, peer_address_}));
    if (staged()) {
      // The link in use before the test (a staged write landed, no
      // notification): a link first progressed while rank 1 ends would read
      // rank 1's entry as rank 1 frees it, which UCX 1.13 cannot survive
      // (docs/rdma.md).
      // Members: a write still in flight after a failed wait reads them.
      ASSERT_OK_AND_ASSIGN(warmup_, transport_->Allocate(64));
      ASSERT_OK(endpoint_->PostWrite({&warmup_, 0, 64}, {&peer_device_, kDeviceBytes - 64, 64},
                                     std::nullopt, [this](absl::Status status) {
                                       EXPECT_OK(status);
                                       warmup_landed_ = true;
                                     }));
      ASSERT_OK(ProgressUntil(warmup_landed_));
    }
  }

  // Ends rank 1 and this rank's transport, then starts both again on a
  // device with `options`.
  void Restart(const device::FakeDeviceOptions& options) {
    TearDown();
    endpoint_.reset();
    transport_.reset();
    device_.reset();
    Start(options);
  }

  void TearDown() override {
    // Rank 1 frees its regions as it ends: our mappings of them go first
    // (rank 1 fails if it freed memory we still had open).
    // A failed test may have returned with operations whose completions
    // point into its frame, which CloseMappings would fire: the transport
    // is destroyed instead.
    if (transport_ != nullptr &&
        (HasFailure() || !transport_->CloseMappings(absl::Now() + kTimeout).ok())) {
      // Its stream failed (an injected fault): it cannot tell its copies
      // ended, and keeps them. Destroyed, it closes them as it goes.
      endpoint_.reset();
      transport_.reset();
    }
    if (link_ != nullptr) link_->Send("quit").IgnoreError();
    if (peer_ > 0) {
      const absl::Time deadline = absl::Now() + kTimeout;
      int status = 0;
      while (waitpid(peer_, &status, WNOHANG) == 0) {
        if (absl::Now() > deadline) {
          kill(peer_, SIGKILL);
          waitpid(peer_, &status, 0);
          ADD_FAILURE() << "rank 1 did not end";
          break;
        }
        // Rank 1 may still need our progress to finish what it does.
        if (transport_ != nullptr) transport_->Progress().IgnoreError();
      }
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank 1 failed";
      peer_ = -1;
    }
    link_.reset();
  }

  absl::StatusOr<std::string> Ask(const std::string& command) {
    RETURN_IF_ERROR(link_->Send(command));
    // Keep progressing while rank 1 works: it may wait on our notifications.
    const absl::Time deadline = absl::Now() + kTimeout;
    while (!link_->Ready(absl::ZeroDuration())) {
      RETURN_IF_ERROR(transport_->Progress().status());
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat("rank 1 did not answer '", command, "'"));
      }
    }
    return link_->Receive();
  }

  std::string Expected(size_t bytes, uint8_t salt, size_t from = 0) {
    std::string out(bytes, '\0');
    for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<char>(Pattern(from + i, salt));
    return out;
  }

  // Posts through `post` with the device paused and every Record of it
  // failing (set back by the caller: FailRecords(0)); progresses until a
  // Record was tried (a copy queued, no event to mark its end), then 50
  // times more; resumes the device whatever happened. Whether `fired` was
  // set while the copy was still queued.
  absl::StatusOr<bool> FiredBeforeAnUnmarkedCopyRan(const std::function<absl::Status()>& post,
                                                    const std::optional<absl::Status>& fired) {
    constexpr int kAll = std::numeric_limits<int>::max();
    // Nothing returns while paused, so that the device always resumes.
    device_->Pause();
    device_->FailRecords(kAll);
    absl::Status status = post();
    const absl::Time deadline = absl::Now() + kTimeout;
    while (status.ok() && device_->records_left_to_fail() == kAll && absl::Now() < deadline) {
      status = transport_->Progress().status();
    }
    if (status.ok() && device_->records_left_to_fail() == kAll) {
      status = absl::DeadlineExceededError("no copy's Record was tried");
    }
    for (int i = 0; i < 50 && status.ok(); ++i) status = transport_->Progress().status();
    const bool early = fired.has_value();
    device_->Resume();
    RETURN_IF_ERROR(status);
    return early;
  }

  // Ask(command), whose answer is a number.
  absl::StatusOr<uint64_t> AskNumber(const std::string& command) {
    ASSIGN_OR_RETURN(std::string answer, Ask(command));
    uint64_t value = 0;
    if (!absl::SimpleAtoi(answer, &value)) {
      return absl::InternalError(absl::StrCat("rank 1 answered '", command, "' with ", answer));
    }
    return value;
  }

  // Progress until `fired` is true.
  absl::Status ProgressUntil(const bool& fired) {
    return rdma::ProgressUntil(
        *transport_, [&] { return fired; }, absl::Now() + kTimeout, "a completion");
  }

  pid_t peer_ = -1;
  std::string peer_address_;
  std::unique_ptr<Link> link_;
  std::unique_ptr<device::FakeDevice> device_;
  std::unique_ptr<DeviceTransport> transport_;
  WaitRecorder* waits_ = nullptr;  // transport_'s host transport
  MemoryRegion warmup_;  // the staged fixture's first write, from here
  bool warmup_landed_ = false;
  std::unique_ptr<Endpoint> endpoint_;
  RemoteRegion peer_device_;
  RemoteRegion peer_host_;
};

TEST_F(DeviceTransportTest, WritesAndReadsAPeersDeviceMemoryFromDeviceAndHostMemory) {
  constexpr size_t kHalf = kDeviceBytes / 2;
  ASSERT_OK_AND_ASSIGN(MemoryRegion on_device, transport_->AllocateDevice(kDeviceBytes));
  ASSERT_OK(Fill(*device_, on_device.data(), kDeviceBytes, 3));
  ASSERT_OK_AND_ASSIGN(MemoryRegion on_host, transport_->Allocate(kDeviceBytes));
  for (size_t i = 0; i < kDeviceBytes; ++i) on_host.data()[i] = std::byte{Pattern(i, 5)};
  EXPECT_EQ(on_device.descriptor().memory_kind, device::MemoryKind::kDevice);
  EXPECT_EQ(on_device.descriptor().backend, "device");

  // Device to device (first half), host to device (second half), notified.
  const absl::Time deadline = absl::Now() + kTimeout;
  ASSERT_OK(Write(*transport_, *endpoint_, {&on_device, 0, kHalf}, {&peer_device_, 0, kHalf},
                  7, deadline));
  ASSERT_OK(Write(*transport_, *endpoint_, {&on_host, kHalf, kHalf},
                  {&peer_device_, kHalf, kHalf}, 8, deadline));
  EXPECT_THAT(Ask("notes 2"), ::rdmaflow::testing::IsOkAndHolds(std::string("7,8")));
  ASSERT_OK_AND_ASSIGN(std::string seen, Ask(absl::StrCat("device 0 ", kDeviceBytes)));
  EXPECT_TRUE(seen.substr(0, kHalf) == Expected(kHalf, 3)) << "device to device";
  EXPECT_TRUE(seen.substr(kHalf) == Expected(kHalf, 5, kHalf)) << "host to device";

  // Reads back, into host memory and into device memory, at an offset.
  ASSERT_OK(Ask("fill 9").status());
  ASSERT_OK_AND_ASSIGN(MemoryRegion back, transport_->Allocate(kHalf));
  ASSERT_OK(Read(*transport_, *endpoint_, {&back, 0, kHalf}, {&peer_device_, 1000, kHalf},
                 deadline));
  EXPECT_TRUE(std::string(reinterpret_cast<const char*>(back.data()), kHalf) ==
              Expected(kHalf, 9, 1000));
  ASSERT_OK(Read(*transport_, *endpoint_, {&on_device, 0, kHalf}, {&peer_device_, 0, kHalf},
                 deadline));
  ASSERT_OK_AND_ASSIGN(std::string read_back, Download(*device_, on_device.data(), kHalf));
  EXPECT_TRUE(read_back == Expected(kHalf, 9));

  // Host regions still go through the host transport.
  ASSERT_OK(Write(*transport_, *endpoint_, {&on_host, 0, 4096}, {&peer_host_, 0, 4096}, 11,
                  deadline));
  EXPECT_THAT(Ask("notes 1"), ::rdmaflow::testing::IsOkAndHolds(std::string("11")));
  EXPECT_THAT(Ask("host 0 4096"), ::rdmaflow::testing::IsOkAndHolds(Expected(4096, 5)));
}

// AllocateDevice's memory is zeroed, as Allocate's is (the runtime's fresh
// memory is not: the fake device's holds FakeDevice::kFreshByte).
TEST_F(DeviceTransportTest, AllocatesZeroedDeviceMemory) {
  ASSERT_OK_AND_ASSIGN(MemoryRegion region, transport_->AllocateDevice(kDeviceBytes + 5));
  ASSERT_OK_AND_ASSIGN(std::string seen, Download(*device_, region.data(), kDeviceBytes + 5));
  EXPECT_TRUE(seen == std::string(kDeviceBytes + 5, '\0'));
  EXPECT_THAT(transport_->AllocateDevice(0), StatusIs(absl::StatusCode::kInvalidArgument));
}

// The Record marking the zeroing's end refused: the allocation waits for
// the zeroing through the stream, and is zeroed all the same.
TEST_F(DeviceTransportTest, AnAllocationWhoseZeroingNoRecordMarksIsZeroedAllTheSame) {
  constexpr int kAll = std::numeric_limits<int>::max();
  device_->FailRecords(kAll);
  const absl::StatusOr<MemoryRegion> unmarked = transport_->AllocateDevice(4096);
  const int left = device_->records_left_to_fail();
  device_->FailRecords(0);
  ASSERT_OK(unmarked.status());
  EXPECT_LT(left, kAll) << "no Record was tried";
  ASSERT_OK_AND_ASSIGN(std::string seen, Download(*device_, unmarked->data(), 4096));
  EXPECT_TRUE(seen == std::string(4096, '\0'));
}

TEST_F(DeviceTransportTest, RegistersACallersDeviceMemoryInsideItsAllocation) {
  ASSERT_OK_AND_ASSIGN(device::DeviceMemory memory, device_->Allocate(1 << 20));
  auto* inside = static_cast<std::byte*>(memory.data()) + 4096;
  ASSERT_OK_AND_ASSIGN(MemoryRegion region, transport_->RegisterDevice(inside, 8192));
  ASSERT_OK(Fill(*device_, inside, 8192, 21));
  ASSERT_OK(Write(*transport_, *endpoint_, {&region, 0, 8192}, {&peer_device_, 64, 8192}, 1,
                  absl::Now() + kTimeout));
  EXPECT_THAT(Ask("notes 1"), ::rdmaflow::testing::IsOkAndHolds(std::string("1")));
  EXPECT_THAT(Ask("device 64 8192"), ::rdmaflow::testing::IsOkAndHolds(Expected(8192, 21)));

  EXPECT_THAT(transport_->RegisterDevice(inside, (1 << 20) - 4095),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("past its end")));
  std::vector<std::byte> host(4096);
  EXPECT_THAT(transport_->RegisterDevice(host.data(), host.size()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("host memory")));
  EXPECT_THAT(transport_->RegisterDevice(inside, 0),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// A slow device: the host write posted after a device write must not have
// its notification seen first; a flush behind both ends after both.
TEST_F(DeviceTransportTest, NotificationsKeepPostOrderAcrossDeviceAndHostWrites) {
  device::FakeDeviceOptions slow;
  slow.operation_delay = absl::Milliseconds(100);
  Restart(slow);
  ASSERT_OK_AND_ASSIGN(MemoryRegion on_device, transport_->AllocateDevice(1 << 20));
  ASSERT_OK_AND_ASSIGN(MemoryRegion on_host, transport_->Allocate(4096));
  std::vector<std::string> order;
  bool flushed = false;
  auto note = [&order](std::string what) {
    return [&order, what](absl::Status status) {
      order.push_back(status.ok() ? what : status.ToString());
    };
  };
  ASSERT_OK(endpoint_->PostWrite({&on_device, 0, 1 << 20}, {&peer_device_, 0, 1 << 20}, 1,
                                 note("device")));
  ASSERT_OK(endpoint_->PostWrite({&on_host, 0, 4096}, {&peer_host_, 0, 4096}, 2,
                                 note("host")));
  ASSERT_OK(endpoint_->PostFlush([&](absl::Status status) {
    order.push_back(status.ok() ? "flush" : status.ToString());
    flushed = true;
  }));
  ASSERT_OK(ProgressUntil(flushed));
  EXPECT_THAT(order, ::testing::ElementsAre("device", "host", "flush"));
  EXPECT_THAT(Ask("notes 2"), ::rdmaflow::testing::IsOkAndHolds(std::string("1,2")));
}

TEST_F(DeviceTransportTest, AFailedCopyFailsItsWriteAndNotifiesNobody) {
  device::FakeDeviceOptions faulty;
  faulty.fail_operation = 2;  // the fill below is the first
  Restart(faulty);
  ASSERT_OK_AND_ASSIGN(MemoryRegion on_device, transport_->AllocateDevice(4096));
  ASSERT_OK(Fill(*device_, on_device.data(), 4096, 1));
  EXPECT_THAT(Write(*transport_, *endpoint_, {&on_device, 0, 4096}, {&peer_device_, 0, 4096},
                    5, absl::Now() + kTimeout),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("injected fault")));
  // The next notification rank 1 sees is this host write's, not the
  // failed copy's.
  ASSERT_OK_AND_ASSIGN(MemoryRegion on_host, transport_->Allocate(4096));
  ASSERT_OK(Write(*transport_, *endpoint_, {&on_host, 0, 4096}, {&peer_host_, 0, 4096}, 6,
                  absl::Now() + kTimeout));
  EXPECT_THAT(Ask("notes 1"), ::rdmaflow::testing::IsOkAndHolds(std::string("6")));
}

// The Record that was to mark the end of a write's copy fails with the
// copy queued: the write is taken all the same, and completes (its
// notification sent) only once the copy ended, so that its memory never
// goes while the copy may read it. A refused Record costs only time.
TEST_F(DeviceTransportTest, AWriteWhoseCopyNoEventMarksCompletesOnlyOnceTheCopyEnded) {
  ASSERT_OK_AND_ASSIGN(MemoryRegion on_device, transport_->AllocateDevice(4096));
  ASSERT_OK(Fill(*device_, on_device.data(), 4096, 21));
  // Shared: a failed test's transport may fire it after this frame.
  auto fired = std::make_shared<std::optional<absl::Status>>();
  auto post = [&] {
    return endpoint_->PostWrite({&on_device, 0, 4096}, {&peer_device_, 0, 4096}, 5,
                                [fired](absl::Status s) { *fired = s; });
  };
  ASSERT_OK_AND_ASSIGN(const bool early, FiredBeforeAnUnmarkedCopyRan(post, *fired));
  EXPECT_FALSE(early) << "completed with its copy still queued";
  ASSERT_OK(rdma::ProgressUntil(
      *transport_, [&] { return fired->has_value(); }, absl::Now() + kTimeout, "the write"));
  device_->FailRecords(0);
  EXPECT_OK(**fired);
  EXPECT_THAT(Ask("notes 1"), ::rdmaflow::testing::IsOkAndHolds(std::string("5")));
  ASSERT_OK_AND_ASSIGN(std::string seen, Ask("device 0 4096"));
  EXPECT_TRUE(seen == Expected(4096, 21));
}

// A peer's descriptor rewritten: each lie is caught before any copy.
TEST_F(DeviceTransportTest, ForgedDeviceRegionsAreRefused) {
  ASSERT_OK_AND_ASSIGN(MemoryRegion on_device, transport_->AllocateDevice(4096));
  auto forge = [&](auto change) {
    RemoteRegion forged = peer_device_;
    DeviceKeyProto key;
    EXPECT_TRUE(key.ParseFromString(forged.packed_key));
    change(forged, key);
    key.set_check(Reseal(key));
    forged.packed_key = key.SerializeAsString();
    return forged;
  };
  auto write = [&](const RemoteRegion& region, uint64_t offset, uint64_t length) {
    return endpoint_->PostWrite({&on_device, 0, length}, {&region, offset, length}, 1,
                                [](absl::Status) { ADD_FAILURE() << "a refused post ran"; });
  };
  // Another host.
  RemoteRegion elsewhere = forge([](RemoteRegion&, DeviceKeyProto& key) { key.set_host("x"); });
  EXPECT_THAT(write(elsewhere, 0, 4096),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("another host")));
  // A larger region claimed in a larger allocation than the one mapped.
  RemoteRegion larger = forge([](RemoteRegion& region, DeviceKeyProto& key) {
    region.length = 64 << 20;
    key.set_allocation_size(128 << 20);
    key.set_offset(0);
  });
  EXPECT_THAT(write(larger, (64 << 20) - 4096, 4096),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("allocation that has")));
  // The region moved past the end of its allocation.
  RemoteRegion shifted = forge([](RemoteRegion&, DeviceKeyProto& key) {
    key.set_allocation_size(key.allocation_size() * 2);
    key.set_offset(kDeviceBytes);
  });
  EXPECT_THAT(write(shifted, 0, 4096), StatusIs(absl::StatusCode::kInvalidArgument));
  // A handle of garbage.
  RemoteRegion garbage = forge([](RemoteRegion&, DeviceKeyProto& key) {
    key.set_ipc_handle(std::string(device::IpcHandle::kBytes, '\x5a'));
  });
  EXPECT_THAT(write(garbage, 0, 4096), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(endpoint_->Prepare(garbage), StatusIs(absl::StatusCode::kInvalidArgument));
  // A slice past the region's end, a key that does not parse.
  EXPECT_THAT(write(peer_device_, kDeviceBytes - 100, 4096),
              StatusIs(absl::StatusCode::kOutOfRange));
  RemoteRegion unparsable = peer_device_;
  unparsable.packed_key = "\xff\xff";
  EXPECT_THAT(write(unparsable, 0, 4096), StatusIs(absl::StatusCode::kInvalidArgument));
  // A host region posing as device memory, and the reverse.
  RemoteRegion posing = peer_host_;
  posing.memory_kind = device::MemoryKind::kDevice;
  EXPECT_THAT(write(posing, 0, 4096), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(endpoint_->PostWrite({&on_device, 0, 4096}, {&peer_host_, 0, 4096}, 1,
                                   [](absl::Status) { ADD_FAILURE() << "a refused post ran"; }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("host memory only")));
  // Device memory is not for loads and stores.
  EXPECT_THAT(endpoint_->MapRemote(WholeRegion(peer_device_)),
              StatusIs(absl::StatusCode::kUnimplemented));
  // After all that, the real region still works.
  EXPECT_THAT(endpoint_->Prepare(peer_device_), IsOk());
  ASSERT_OK(Write(*transport_, *endpoint_, {&on_device, 0, 4096}, {&peer_device_, 0, 4096}, 3,
                  absl::Now() + kTimeout));
  EXPECT_THAT(Ask("notes 1"), ::rdmaflow::testing::IsOkAndHolds(std::string("3")));
}

// MapDevice gives a peer's device region to this process's own device work
// (a collective's reduce launches), through the mapping the posts use, and
// refuses what is not a device region of a peer on this host.
TEST_F(DeviceTransportTest, MapsAPeersDeviceRegionForDeviceWork) {
  ASSERT_OK(Ask("fill 21").status());
  ASSERT_OK_AND_ASSIGN(std::byte * at,
                       transport_->MapDevice(*endpoint_, {&peer_device_, 512, 4096}));
  EXPECT_EQ(transport_->mapped_allocations(), 1u);
  ASSERT_OK_AND_ASSIGN(std::string seen, Download(*device_, at, 4096));
  EXPECT_TRUE(seen == Expected(4096, 21, 512));
  // The posts use the same mapping.
  ASSERT_OK_AND_ASSIGN(MemoryRegion back, transport_->Allocate(4096));
  ASSERT_OK(Read(*transport_, *endpoint_, {&back, 0, 4096}, {&peer_device_, 512, 4096},
                 absl::Now() + kTimeout));
  EXPECT_EQ(transport_->mapped_allocations(), 1u);

  EXPECT_THAT(transport_->MapDevice(*endpoint_, {&peer_host_, 0, 4096}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a device region")));
  EXPECT_THAT(transport_->MapDevice(*endpoint_, {&peer_device_, kDeviceBytes - 8, 4096}),
              StatusIs(absl::StatusCode::kOutOfRange));
  RemoteRegion elsewhere = peer_device_;
  DeviceKeyProto key;
  ASSERT_TRUE(key.ParseFromString(elsewhere.packed_key));
  key.set_host("another");
  key.set_check(Reseal(key));
  elsewhere.packed_key = key.SerializeAsString();
  EXPECT_THAT(transport_->MapDevice(*endpoint_, WholeRegion(elsewhere)),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("another host")));
  // An endpoint of another transport.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Transport> plain,
                       CreateBuiltinTransport("ucx", "tls=shm", 0));
  DeviceAddressProto address;
  ASSERT_TRUE(address.ParseFromString(peer_address_));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Endpoint> foreign,
                       plain->Connect({1, address.host_address()}));
  EXPECT_THAT(transport_->MapDevice(*foreign, WholeRegion(peer_device_)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not an endpoint")));
}

// A teardown closes every mapping of the peers' allocations while the
// endpoints live, refused while a copy runs. Copies that ended after the
// last Progress() (the caller waited on the device, as a
// cudaDeviceSynchronize does, not on the transport) do not hold it:
// CloseMappings completes a read, and posts a write's notification. A
// post afterwards maps again.
TEST_F(DeviceTransportTest, CloseMappingsClosesThemAllOnceNoCopyRuns) {
  ASSERT_OK(Ask("fill 5").status());
  ASSERT_OK_AND_ASSIGN(MemoryRegion back, transport_->Allocate(4096));
  ASSERT_OK_AND_ASSIGN(MemoryRegion out, transport_->Allocate(64));
  std::optional<absl::Status> read, wrote;
  // The copies stay queued while paused; nothing fails in between, so
  // that the device always resumes.
  device_->Pause();
  absl::Status posted = endpoint_->PostRead({&back, 0, 4096}, {&peer_device_, 0, 4096},
                                            [&](absl::Status status) { read = status; });
  if (posted.ok()) {
    posted = endpoint_->PostWrite({&out, 0, 64}, {&peer_device_, 4096, 64}, 9,
                                  [&](absl::Status status) { wrote = status; });
  }
  const size_t mapped = transport_->mapped_allocations();
  const absl::Status refused = transport_->CloseMappings(absl::Now() + kTimeout);
  const size_t still_mapped = transport_->mapped_allocations();
  device_->Resume();
  ASSERT_OK(posted);
  EXPECT_EQ(mapped, 1u);
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("rank 1")));
  EXPECT_EQ(still_mapped, 1u);
  // Freeing device memory waits for every stream's work, as cudaFree does.
  { ASSERT_OK_AND_ASSIGN(device::DeviceMemory synced, device_->Allocate(64)); }
  EXPECT_FALSE(read.has_value());
  ASSERT_OK(transport_->CloseMappings(absl::Now() + kTimeout));
  ASSERT_TRUE(read.has_value());
  ASSERT_OK(*read);
  EXPECT_EQ(transport_->mapped_allocations(), 0u);
  // The write's notification went out from the close; its completion
  // fires from a later Progress() (Ask's).
  EXPECT_THAT(Ask("notes 1"), ::rdmaflow::testing::IsOkAndHolds(std::string("9")));
  ASSERT_OK(rdma::ProgressUntil(
      *transport_, [&] { return wrote.has_value(); }, absl::Now() + kTimeout, "the write"));
  EXPECT_OK(*wrote);
  // The endpoint maps again for its next post.
  ASSERT_OK(Read(*transport_, *endpoint_, {&back, 0, 4096}, {&peer_device_, 0, 4096},
                 absl::Now() + kTimeout));
  EXPECT_EQ(transport_->mapped_allocations(), 1u);
  std::string seen(reinterpret_cast<const char*>(back.data()), 4096);
  EXPECT_TRUE(seen == Expected(4096, 5, 0));
}

// A completion fired from CloseMappings may drop its own endpoint and call
// Progress() again (rdma/endpoint.h): the close goes on over the queue the
// completion came from, which only a later Progress() drops.
TEST_F(DeviceTransportTest, ACompletionFromCloseMappingsMayDropItsEndpointAndProgress) {
  ASSERT_OK(Ask("fill 5").status());
  ASSERT_OK_AND_ASSIGN(MemoryRegion back, transport_->Allocate(4096));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Endpoint> own, transport_->Connect({1, peer_address_}));
  std::optional<absl::Status> read;
  absl::Status nested;
  ASSERT_OK(own->PostRead({&back, 0, 4096}, {&peer_device_, 0, 4096},
                          [&](absl::Status status) {
                            read = status;
                            own.reset();
                            nested = transport_->Progress().status();
                          }));
  // Freeing device memory waits for every stream's work, as cudaFree does:
  // the copy has ended, and no Progress() has seen it.
  { ASSERT_OK_AND_ASSIGN(device::DeviceMemory synced, device_->Allocate(64)); }
  EXPECT_FALSE(read.has_value());
  ASSERT_OK(transport_->CloseMappings(absl::Now() + kTimeout));
  ASSERT_TRUE(read.has_value());
  ASSERT_OK(*read);
  EXPECT_OK(nested) << "Progress() from inside a completion fired by CloseMappings";
  EXPECT_EQ(own, nullptr);
  EXPECT_EQ(transport_->mapped_allocations(), 0u);
  std::string seen(reinterpret_cast<const char*>(back.data()), 4096);
  EXPECT_TRUE(seen == Expected(4096, 5, 0));
  // The transport goes on: the fixture's endpoint maps the peer again.
  ASSERT_OK(transport_->Progress().status());
  ASSERT_OK(Read(*transport_, *endpoint_, {&back, 1024, 1024}, {&peer_device_, 0, 1024},
                 absl::Now() + kTimeout));
  EXPECT_EQ(transport_->mapped_allocations(), 1u);
}

// A region's device memory outlives the region until its transport goes:
// a peer may still have it open until the collective teardown.
TEST_F(DeviceTransportTest, ADestroyedRegionsMemoryIsFreedWithItsTransport) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceTransport> own, MakeTransport(device_.get(), 0));
  const std::byte* data = nullptr;
  {
    ASSERT_OK_AND_ASSIGN(MemoryRegion region, own->AllocateDevice(8192));
    data = region.data();
    EXPECT_EQ(own->retired_bytes(), 0u);
  }
  EXPECT_EQ(own->retired_bytes(), 8192u);
  ASSERT_OK_AND_ASSIGN(device::PointerInfo kept, device_->Query(data));
  EXPECT_EQ(kept.kind, device::MemoryKind::kDevice);
  own.reset();
  ASSERT_OK_AND_ASSIGN(device::PointerInfo freed, device_->Query(data));
  EXPECT_NE(freed.kind, device::MemoryKind::kDevice);
  // A region that outlives its transport frees its memory itself.
  ASSERT_OK_AND_ASSIGN(own, MakeTransport(device_.get(), 0));
  ASSERT_OK_AND_ASSIGN(MemoryRegion outliving, own->AllocateDevice(4096));
  data = outliving.data();
  own.reset();
  ASSERT_OK_AND_ASSIGN(kept, device_->Query(data));
  EXPECT_EQ(kept.kind, device::MemoryKind::kDevice);
  outliving = MemoryRegion();
  ASSERT_OK_AND_ASSIGN(freed, device_->Query(data));
  EXPECT_NE(freed.kind, device::MemoryKind::kDevice);
}

// Closing, or destroying, an endpoint with a copy in flight: the copy's
// completion fires from Progress once the copy has ended, as kCancelled,
// and later posts are refused.
TEST_F(DeviceTransportTest, ClosingWithACopyInFlightCancelsItAfterItEnds) {
  device::FakeDeviceOptions slow;
  slow.operation_delay = absl::Milliseconds(50);
  Restart(slow);
  ASSERT_OK_AND_ASSIGN(MemoryRegion on_device, transport_->AllocateDevice(4096));
  std::optional<absl::Status> first, second;
  ASSERT_OK(endpoint_->PostWrite({&on_device, 0, 4096}, {&peer_device_, 0, 4096}, 1,
                                 [&](absl::Status status) { first = status; }));
  ASSERT_OK(endpoint_->Close());
  EXPECT_THAT(endpoint_->PostWrite({&on_device, 0, 4096}, {&peer_device_, 0, 4096}, 1,
                                   [](absl::Status) {}),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_FALSE(first.has_value()) << "fired inline";
  ASSERT_OK(rdma::ProgressUntil(
      *transport_, [&] { return first.has_value(); }, absl::Now() + kTimeout,
      "the cancelled write"));
  EXPECT_THAT(*first, StatusIs(absl::StatusCode::kCancelled));

  // Destroyed rather than closed: the same, from the transport's Progress.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Endpoint> again, transport_->Connect({1, peer_address_}));
  std::optional<absl::Status> third;
  ASSERT_OK(again->PostWrite({&on_device, 0, 4096}, {&peer_device_, 0, 4096}, 1,
                             [&](absl::Status status) { third = status; }));
  again.reset();
  ASSERT_OK(rdma::ProgressUntil(
      *transport_, [&] { return third.has_value(); }, absl::Now() + kTimeout,
      "the write of a destroyed endpoint"));
  EXPECT_THAT(*third, StatusIs(absl::StatusCode::kCancelled));

  // The peer's allocation stays mapped while an endpoint that used it is
  // left (the closed one), and is closed with the last.
  ASSERT_OK(transport_->Progress().status());
  EXPECT_EQ(transport_->mapped_allocations(), 1);
  endpoint_.reset();
  ASSERT_OK(transport_->Progress().status());
  EXPECT_EQ(transport_->mapped_allocations(), 0);
}

// Idle, with no copy running and no staged peer, a wait is the caller's.
TEST_F(DeviceTransportTest, AnIdleTransportWaitsAsLongAsAsked) {
  transport_->WaitForActivity(absl::Milliseconds(20));
  EXPECT_EQ(waits_->last_wait(), absl::Milliseconds(20));
}

// Once the host transport says rank 1 is gone, no device copy goes into or
// out of its memory: its allocations may be freed, and a copy there could
// end this process's device context.
TEST_F(DeviceTransportTest, ADeadPeerGetsNoMoreDeviceCopies) {
  ASSERT_OK_AND_ASSIGN(MemoryRegion on_device, transport_->AllocateDevice(4096));
  ASSERT_OK_AND_ASSIGN(MemoryRegion on_host, transport_->Allocate(4096));
  ASSERT_OK(endpoint_->Prepare(peer_device_));
  ASSERT_OK(endpoint_->Prepare(peer_host_));  // as every region is before its owner can go
  ASSERT_EQ(transport_->mapped_allocations(), 1);
  kill(peer_, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(peer_, &status, 0), peer_);
  peer_ = -1;
  link_.reset();
  // The host transport finds out within its liveness bound (UCX: two
  // keepalive intervals); until then host writes may still succeed.
  const absl::Time deadline = absl::Now() + kTimeout;
  absl::Status host_write;
  do {
    host_write = Write(*transport_, *endpoint_, {&on_host, 0, 4096}, {&peer_host_, 0, 4096}, 1,
                       deadline);
  } while (host_write.ok() && absl::Now() < deadline);
  ASSERT_THAT(host_write, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(endpoint_->PostWrite({&on_device, 0, 4096}, {&peer_device_, 0, 4096}, 2,
                                   [](absl::Status) { ADD_FAILURE() << "a refused post ran"; }),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rank 1 is gone")));
  EXPECT_THAT(endpoint_->PostRead({&on_device, 0, 4096}, {&peer_device_, 0, 4096},
                                  [](absl::Status) { ADD_FAILURE() << "a refused post ran"; }),
              StatusIs(absl::StatusCode::kUnavailable));
  // Its allocation is unmapped once no copy runs, and never mapped again.
  ASSERT_OK(rdma::ProgressUntil(
      *transport_, [&] { return transport_->mapped_allocations() == 0; },
      absl::Now() + kTimeout, "the dead peer's mapping closed"));
  EXPECT_THAT(endpoint_->Prepare(peer_device_),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rank 1 is gone")));
  EXPECT_EQ(transport_->mapped_allocations(), 0);
}

// Rank 1 claims another host: rank 0's writes into its device memory go
// through the staging links, chunk by chunk (2 slots of 64 KiB, each reused
// dozens of times), both fake devices slowed to 500 us per copy, so that a
// notification sent before the last chunk's copy landed would show as
// stale bytes.
class StagedDeviceTransportTest : public DeviceTransportTest {
 protected:
  bool staged() const override { return true; }
};

TEST_F(StagedDeviceTransportTest, WritesIntoAnotherHostsDeviceMemoryInChunks) {
  EXPECT_THAT(transport_->capabilities().description, HasSubstr("staged"));
  EXPECT_THAT(endpoint_->Describe(), HasSubstr("(another host) written through pinned host"));
  constexpr size_t kFromDevice = (1 << 20) + 77, kFromHost = 300000, kToHost = 4096;
  ASSERT_OK_AND_ASSIGN(MemoryRegion on_device, transport_->AllocateDevice(kFromDevice));
  ASSERT_OK(Fill(*device_, on_device.data(), kFromDevice, 3));
  ASSERT_OK_AND_ASSIGN(MemoryRegion on_host, transport_->Allocate(kFromHost));
  for (size_t i = 0; i < kFromHost; ++i) on_host.data()[i] = std::byte{Pattern(i, 5)};
  ASSERT_OK(endpoint_->Prepare(peer_device_));
  // Back to back: a staged write from device memory, one from host memory,
  // and a host write; their notifications arrive in that order.
  int completed = 0;
  auto count = [&](absl::Status status) {
    EXPECT_OK(status);
    ++completed;
  };
  ASSERT_OK(endpoint_->PostWrite({&on_device, 0, kFromDevice}, {&peer_device_, 1000, kFromDevice},
                                 7, count));
  ASSERT_OK(endpoint_->PostWrite({&on_host, 0, kFromHost}, {&peer_device_, 2 << 20, kFromHost},
                                 8, count));
  ASSERT_OK(endpoint_->PostWrite({&on_host, 0, kToHost}, {&peer_host_, 0, kToHost}, 9, count));
  ASSERT_OK(rdma::ProgressUntil(
      *transport_, [&] { return completed == 3; }, absl::Now() + kTimeout, "three writes"));
  EXPECT_THAT(Ask("notes 3"), ::rdmaflow::testing::IsOkAndHolds(std::string("7,8,9")));
  ASSERT_OK_AND_ASSIGN(std::string seen, Ask(absl::StrCat("device 1000 ", kFromDevice)));
  EXPECT_TRUE(seen == Expected(kFromDevice, 3)) << "device to another host's device";
  ASSERT_OK_AND_ASSIGN(seen, Ask(absl::StrCat("device ", 2 << 20, " ", kFromHost)));
  EXPECT_TRUE(seen == Expected(kFromHost, 5)) << "host to another host's device";
  // Again, with the slots well used: the same link, fresh bytes.
  ASSERT_OK(Fill(*device_, on_device.data(), kFromDevice, 11));
  ASSERT_OK(Write(*transport_, *endpoint_, {&on_device, 0, kFromDevice},
                  {&peer_device_, 0, kFromDevice}, 12, absl::Now() + kTimeout));
  EXPECT_THAT(Ask("notes 1"), ::rdmaflow::testing::IsOkAndHolds(std::string("12")));
  ASSERT_OK_AND_ASSIGN(seen, Ask(absl::StrCat("device 0 ", kFromDevice)));
  EXPECT_TRUE(seen == Expected(kFromDevice, 11));
}

TEST_F(StagedDeviceTransportTest, ReadsAnotherHostsDeviceMemoryInChunks) {
  ASSERT_OK(Ask("fill 13").status());
  constexpr size_t kToHost = 300001, kToDevice = 200000;
  ASSERT_OK_AND_ASSIGN(MemoryRegion on_host, transport_->Allocate(kToHost));
  ASSERT_OK_AND_ASSIGN(MemoryRegion on_device, transport_->AllocateDevice(kToDevice + 100));
  ASSERT_OK_AND_ASSIGN(MemoryRegion source, transport_->AllocateDevice(4096));
  ASSERT_OK(Fill(*device_, source.data(), 4096, 17));
  // Two reads and a write, back to back; all three complete.
  int completed = 0;
  auto count = [&](absl::Status status) {
    EXPECT_OK(status);
    ++completed;
  };
  ASSERT_OK(endpoint_->PostRead({&on_host, 0, kToHost}, {&peer_device_, 1000, kToHost}, count));
  ASSERT_OK(endpoint_->PostRead({&on_device, 100, kToDevice}, {&peer_device_, 5000, kToDevice},
                                count));
  ASSERT_OK(endpoint_->PostWrite({&source, 0, 4096}, {&peer_device_, 3 << 20, 4096}, 4, count));
  ASSERT_OK(rdma::ProgressUntil(
      *transport_, [&] { return completed == 3; }, absl::Now() + kTimeout, "two reads, a write"));
  EXPECT_TRUE(std::string(reinterpret_cast<const char*>(on_host.data()), kToHost) ==
              Expected(kToHost, 13, 1000))
      << "another host's device memory into host memory";
  ASSERT_OK_AND_ASSIGN(std::string seen, Download(*device_, on_device.data() + 100, kToDevice));
  EXPECT_TRUE(seen == Expected(kToDevice, 13, 5000))
      << "another host's device memory into device memory";
  EXPECT_THAT(Ask("notes 1"), ::rdmaflow::testing::IsOkAndHolds(std::string("4")));
  ASSERT_OK_AND_ASSIGN(seen, Ask(absl::StrCat("device ", 3 << 20, " 4096")));
  EXPECT_TRUE(seen == Expected(4096, 17));
}

// The staged link's own copies, out of a write's device source and into a
// read's destination: where the Record that was to mark one's end fails,
// the link goes on, watching the copy through the stream, and the
// operation completes only once the copy ended.
TEST_F(StagedDeviceTransportTest, AStagedWriteWhoseCopyNoEventMarksEndsOnlyAfterTheCopy) {
  ASSERT_OK_AND_ASSIGN(MemoryRegion on_device, transport_->AllocateDevice(4096));
  ASSERT_OK(Fill(*device_, on_device.data(), 4096, 22));
  auto fired = std::make_shared<std::optional<absl::Status>>();
  auto post = [&] {
    return endpoint_->PostWrite({&on_device, 0, 4096}, {&peer_device_, 0, 4096}, std::nullopt,
                                [fired](absl::Status s) { *fired = s; });
  };
  ASSERT_OK_AND_ASSIGN(const bool early, FiredBeforeAnUnmarkedCopyRan(post, *fired));
  EXPECT_FALSE(early) << "completed with the copy out of its source still queued";
  ASSERT_OK(rdma::ProgressUntil(
      *transport_, [&] { return fired->has_value(); }, absl::Now() + kTimeout, "the write"));
  device_->FailRecords(0);
  EXPECT_OK(**fired);
  ASSERT_OK_AND_ASSIGN(std::string seen, Ask("device 0 4096"));
  EXPECT_TRUE(seen == Expected(4096, 22));
}

TEST_F(StagedDeviceTransportTest, AStagedReadWhoseCopyNoEventMarksEndsOnlyAfterTheCopy) {
  ASSERT_OK(Ask("fill 23").status());
  ASSERT_OK_AND_ASSIGN(MemoryRegion on_device, transport_->AllocateDevice(4096));
  auto fired = std::make_shared<std::optional<absl::Status>>();
  auto post = [&] {
    return endpoint_->PostRead({&on_device, 0, 4096}, {&peer_device_, 0, 4096},
                               [fired](absl::Status s) { *fired = s; });
  };
  ASSERT_OK_AND_ASSIGN(const bool early, FiredBeforeAnUnmarkedCopyRan(post, *fired));
  EXPECT_FALSE(early) << "completed with the copy into its destination still queued";
  ASSERT_OK(rdma::ProgressUntil(
      *transport_, [&] { return fired->has_value(); }, absl::Now() + kTimeout, "the read"));
  device_->FailRecords(0);
  EXPECT_OK(**fired);
  ASSERT_OK_AND_ASSIGN(std::string seen, Download(*device_, on_device.data(), 4096));
  EXPECT_TRUE(seen == Expected(4096, 23));
}

// A staged peer's chunks and read requests are silent writes into our
// link: a transport linked to one never sleeps past kStagedPeerLook, or a
// read of its device memory would wait for its next look (the device
// check measured 530 us reads on an H200 with 1 ms looks).
TEST_F(StagedDeviceTransportTest, AnIdleTransportLooksForItsStagedPeersSoon) {
  transport_->WaitForActivity(absl::Seconds(5));
  EXPECT_LE(waits_->last_wait(), DeviceTransport::kStagedPeerLook);
  EXPECT_GT(waits_->last_wait(), absl::ZeroDuration());
}

// Several endpoints to one staged peer (as several protocols open): they
// share one link, so the peer's one directory entry for us serves them all.
TEST_F(StagedDeviceTransportTest, EndpointsToOnePeerShareItsLink) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Endpoint> second,
                       transport_->Connect({1, peer_address_}));
  ASSERT_OK_AND_ASSIGN(MemoryRegion on_device, transport_->AllocateDevice(200000));
  ASSERT_OK(Fill(*device_, on_device.data(), 200000, 19));
  int completed = 0;
  auto count = [&](absl::Status status) {
    EXPECT_OK(status);
    ++completed;
  };
  ASSERT_OK(endpoint_->PostWrite({&on_device, 0, 100000}, {&peer_device_, 0, 100000}, 21,
                                 count));
  ASSERT_OK(second->PostWrite({&on_device, 100000, 100000}, {&peer_device_, 100000, 100000},
                              22, count));
  ASSERT_OK(rdma::ProgressUntil(
      *transport_, [&] { return completed == 2; }, absl::Now() + kTimeout, "two writes"));
  ASSERT_OK_AND_ASSIGN(std::string notes, Ask("notes 2"));
  EXPECT_THAT(notes, ::testing::AnyOf("21,22", "22,21"));
  ASSERT_OK_AND_ASSIGN(std::string seen, Ask("device 0 200000"));
  EXPECT_TRUE(seen == Expected(200000, 19));
  // Destroying one endpoint leaves the link to the others.
  second.reset();
  ASSERT_OK(Fill(*device_, on_device.data(), 4096, 23));
  ASSERT_OK(Write(*transport_, *endpoint_, {&on_device, 0, 4096}, {&peer_device_, 0, 4096}, 24,
                  absl::Now() + kTimeout));
  EXPECT_THAT(Ask("notes 1"), ::rdmaflow::testing::IsOkAndHolds(std::string("24")));
  ASSERT_OK_AND_ASSIGN(seen, Ask("device 0 4096"));
  EXPECT_TRUE(seen == Expected(4096, 23));
}

// An endpoint closed with staged reads queued: those whose request went
// are answered (landing nowhere), the one whose request had to wait for a
// free request slot (2 here) goes void, and rank 1 stages no bytes for it
// (only an empty answer). A read of another endpoint to rank 1 (the same
// link, its request after the void one) then completes as before.
TEST_F(StagedDeviceTransportTest, RankOneStagesNothingForAReadCancelledBeforeItsRequestWent) {
  constexpr size_t kClosed = 100000, kAfter = 5000;
  ASSERT_OK(Ask("fill 29").status());
  ASSERT_OK_AND_ASSIGN(uint64_t before, AskNumber("answered"));
  // Before `second`, which a completion may outlive; `into` too.
  int cancelled = 0;
  ASSERT_OK_AND_ASSIGN(MemoryRegion into, transport_->Allocate(3 * kClosed + kAfter));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Endpoint> second, transport_->Connect({1, peer_address_}));
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_OK(second->PostRead({&into, i * kClosed, kClosed}, {&peer_device_, i * kClosed, kClosed},
                               [&](absl::Status status) {
                                 EXPECT_THAT(status, StatusIs(absl::StatusCode::kCancelled));
                                 ++cancelled;
                               }));
  }
  ASSERT_OK(second->Close());
  ASSERT_OK(rdma::ProgressUntil(
      *transport_, [&] { return cancelled == 3; }, absl::Now() + kTimeout, "three cancellations"));
  ASSERT_OK(Read(*transport_, *endpoint_, {&into, 3 * kClosed, kAfter},
                 {&peer_device_, 7000, kAfter}, absl::Now() + kTimeout));
  EXPECT_TRUE(std::string(reinterpret_cast<const char*>(into.data()) + 3 * kClosed, kAfter) ==
              Expected(kAfter, 29, 7000));
  // Progress() moves the links before the endpoints' queues: the first
  // one after the close posted the first two requests (both slots free on
  // this fresh link, and room for the posts) before it cancelled them, so
  // rank 1 answered those in full.
  ASSERT_OK_AND_ASSIGN(uint64_t after, AskNumber("answered"));
  EXPECT_EQ(after - before, 2 * kClosed + kAfter)
      << "rank 1 answered the read whose request was not sent before it was cancelled";
}

// A target that dies: the sender's wait for its credits ends within the
// host transport's liveness bound, with an error naming it.
TEST_F(StagedDeviceTransportTest, ADeadTargetFailsAStagedWriteWithinTheLivenessBound) {
  ASSERT_OK_AND_ASSIGN(MemoryRegion on_device, transport_->AllocateDevice(3 << 16));
  // The link works first (both sides published), then rank 1 dies.
  ASSERT_OK(Write(*transport_, *endpoint_, {&on_device, 0, 4096}, {&peer_device_, 0, 4096}, 1,
                  absl::Now() + kTimeout));
  kill(peer_, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(peer_, &status, 0), peer_);
  peer_ = -1;
  link_.reset();
  bool fired = false;
  absl::Status result;
  ASSERT_OK(endpoint_->PostWrite({&on_device, 0, 3 << 16}, {&peer_device_, 0, 3 << 16}, 2,
                                 [&](absl::Status s) {
                                   result = std::move(s);
                                   fired = true;
                                 }));
  ASSERT_OK(rdma::ProgressUntil(
      *transport_, [&] { return fired; }, absl::Now() + kTimeout, "the staged write's end"));
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rank 1"))) << result;
}

TEST_F(StagedDeviceTransportTest, WhatIsNotStagedIsRefusedByName) {
  ASSERT_OK_AND_ASSIGN(MemoryRegion on_device, transport_->AllocateDevice(4096));
  EXPECT_THAT(transport_->MapDevice(*endpoint_, {&peer_device_, 0, 4096}),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("another host")));
  // Device memory into a peer's host region: never handed to the host
  // transport.
  EXPECT_THAT(endpoint_->PostWrite({&on_device, 0, 4096}, {&peer_host_, 0, 4096}, std::nullopt,
                                   [](absl::Status) { ADD_FAILURE() << "a refused post ran"; }),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // A region that claims this host behind an address that named another.
  RemoteRegion here = peer_device_;
  DeviceKeyProto key;
  ASSERT_TRUE(key.ParseFromString(here.packed_key));
  ASSERT_OK_AND_ASSIGN(std::string this_host, ThisHost());
  key.set_host(this_host);
  key.set_check(Reseal(key));
  here.packed_key = key.SerializeAsString();
  EXPECT_THAT(endpoint_->PostWrite({&on_device, 0, 4096}, {&here, 0, 4096}, 1,
                                   [](absl::Status) { ADD_FAILURE() << "a refused post ran"; }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("claims this host")));
}

}  // namespace
}  // namespace rdmaflow::rdma::device_path

int main(int argc, char** argv) {
  if (const char* fd = std::getenv(rdmaflow::rdma::device_path::kPeerEnv)) {
    absl::Status status = rdmaflow::rdma::device_path::RunPeer(std::atoi(fd));
    if (!status.ok()) {
      std::fprintf(stderr, "rank 1: %s\n", status.ToString().c_str());
      return 1;
    }
    // Its regions are gone: none while rank 0 still had them open.
    return rdmaflow::device::FakeDevice::frees_while_open() == 0 ? 0 : 4;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
