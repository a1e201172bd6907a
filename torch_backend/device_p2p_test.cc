// DeviceP2p's messages are a peer's bytes: forged ones (too short, another
// magic, version or kind, a size that is not the receive's, inline bytes
// that do not fill the message, a tensor past the end of the allocation it
// names, an offset that wraps, a handle that names nothing) are refused,
// naming the peer; good ones land, device to device through a mapping
// opened once. The peer that exports is a child process (an IPC handle
// does not open in the process that made it), on a fake device of its own.
// A message cannot change under the receiver: it is the Messenger's copy
// in the receiver's own memory; the peer's tensor is read by the device's
// copy alone, within the mapping.
#include "torch_backend/device_p2p.h"

#include <ATen/ATen.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "device/fake/fake_device.h"
#include "gtest/gtest.h"
#include "torch_backend/tensor_device.h"

namespace rdmaflow::torch_backend {
namespace {

constexpr size_t kAllocation = 4096;

// Byte i of the child's allocation.
uint8_t Pattern(size_t i) { return static_cast<uint8_t>(i * 7 + 3); }

// A child process that holds two fake device allocations of kAllocation
// bytes, filled with Pattern, until the test ends; their IPC handles.
class Exporter {
 public:
  void Start() {
    int handle_pipe[2];
    int done_pipe[2];
    ASSERT_EQ(pipe(handle_pipe), 0);
    ASSERT_EQ(pipe(done_pipe), 0);
    child_ = fork();
    ASSERT_GE(child_, 0);
    if (child_ == 0) {
      close(handle_pipe[0]);
      close(done_pipe[1]);
      _exit(RunChild(handle_pipe[1], done_pipe[0]));
    }
    close(handle_pipe[1]);
    close(done_pipe[0]);
    done_ = done_pipe[1];
    for (device::IpcHandle* handle : {&handle_, &second_}) {
      ASSERT_EQ(read(handle_pipe[0], handle->bytes.data(), handle->bytes.size()),
                static_cast<ssize_t>(handle->bytes.size()))
          << "the exporting child did not answer";
    }
    close(handle_pipe[0]);
  }
  ~Exporter() {
    if (child_ <= 0) return;
    close(done_);
    int status = 0;
    waitpid(child_, &status, 0);
  }
  const device::IpcHandle& handle() const { return handle_; }
  // A second allocation of the child's, filled alike.
  const device::IpcHandle& second() const { return second_; }

 private:
  static int RunChild(int handle_fd, int done_fd) {
    absl::StatusOr<std::unique_ptr<device::FakeDevice>> fake = device::FakeDevice::Create({});
    if (!fake.ok()) return 1;
    std::vector<device::DeviceMemory> memories;
    for (int k = 0; k < 2; ++k) {
      absl::StatusOr<device::DeviceMemory> memory = (*fake)->Allocate(kAllocation);
      if (!memory.ok()) return 2;
      std::vector<uint8_t> bytes(kAllocation);
      for (size_t i = 0; i < kAllocation; ++i) bytes[i] = Pattern(i);
      absl::StatusOr<std::unique_ptr<device::Stream>> stream = (*fake)->CreateStream();
      absl::StatusOr<std::unique_ptr<device::Event>> done = (*fake)->CreateEvent();
      if (!stream.ok() || !done.ok() ||
          !(*stream)->Copy(memory->data(), bytes.data(), kAllocation).ok() ||
          !(*stream)->Record(**done).ok() ||
          !(*done)->WaitUntil(absl::Now() + absl::Seconds(30), "the child's fill").ok()) {
        return 3;
      }
      absl::StatusOr<device::IpcHandle> handle = (*fake)->ExportIpc(memory->data());
      if (!handle.ok()) return 4;
      if (write(handle_fd, handle->bytes.data(), handle->bytes.size()) !=
          static_cast<ssize_t>(handle->bytes.size())) {
        return 5;
      }
      memories.push_back(*std::move(memory));
    }
    char c;
    while (read(done_fd, &c, 1) > 0) {
    }
    return 0;
  }

  pid_t child_ = -1;
  int done_ = -1;
  device::IpcHandle handle_;
  device::IpcHandle second_;
};

class DeviceP2pTest : public ::testing::Test {
 protected:
  void SetUp() override {
    exporter_.Start();
    ASSERT_FALSE(HasFatalFailure());
    ASSERT_OK_AND_ASSIGN(device_, TensorDevice::Fake());
    p2p_ = std::make_unique<DeviceP2p>(*device_, /*mappings_per_peer=*/1);
    ASSERT_OK_AND_ASSIGN(dst_, device_->runtime().Allocate(kAllocation));
  }
  void TearDown() override {
    p2p_.reset();
    dst_ = device::DeviceMemory();
  }

  // A message with `header`, and `extra` bytes after it.
  static DeviceP2p::Outgoing Message(const DeviceMessageHeader& header, size_t extra = 0) {
    DeviceP2p::Outgoing out;
    out.size = sizeof(header) + extra;
    out.data.reset(new std::byte[out.size]);
    std::memcpy(out.data.get(), &header, sizeof(header));
    for (size_t i = 0; i < extra; ++i) out.data[sizeof(header) + i] = std::byte{0x5A};
    return out;
  }
  DeviceMessageHeader Ipc(uint64_t offset, uint64_t bytes) const {
    DeviceMessageHeader header;
    header.kind = DeviceMessageHeader::kIpc;
    header.offset = offset;
    header.bytes = bytes;
    header.handle = exporter_.handle();
    return header;
  }
  absl::Status Deliver(DeviceP2p::Outgoing& message, size_t bytes, bool* inline_bytes,
                       int peer = 3) {
    answer_ = DeviceAck();
    return p2p_->Deliver(peer, message, message.size, dst_.data(), bytes,
                         absl::Now() + absl::Seconds(30), answer_, inline_bytes);
  }
  std::vector<uint8_t> Received(size_t bytes) {
    std::vector<uint8_t> out(bytes);
    EXPECT_OK(device_->Copy(out.data(), dst_.data(), bytes, absl::Now() + absl::Seconds(30),
                            "the test's read"));
    return out;
  }

  Exporter exporter_;
  DeviceAck answer_;
  std::unique_ptr<TensorDevice> device_;
  std::unique_ptr<DeviceP2p> p2p_;
  device::DeviceMemory dst_;
};

TEST_F(DeviceP2pTest, ATensorInsideThePeersAllocationLandsThroughOneMapping) {
  for (int twice = 0; twice < 2; ++twice) {
    DeviceP2p::Outgoing message = Message(Ipc(1024, 256));
    bool inline_bytes = true;
    ASSERT_OK(Deliver(message, 256, &inline_bytes));
    EXPECT_FALSE(inline_bytes);
    const std::vector<uint8_t> got = Received(256);
    for (size_t i = 0; i < 256; ++i) ASSERT_EQ(got[i], Pattern(1024 + i)) << i;
  }
  EXPECT_EQ(p2p_->mappings_opened(), 1);
  EXPECT_EQ(p2p_->mappings_kept(), 1u);
  // The whole allocation, to its last byte.
  DeviceP2p::Outgoing whole = Message(Ipc(0, kAllocation));
  bool inline_bytes = true;
  ASSERT_OK(Deliver(whole, kAllocation, &inline_bytes));
  EXPECT_EQ(Received(kAllocation).back(), Pattern(kAllocation - 1));
}

TEST_F(DeviceP2pTest, InlineBytesLand) {
  DeviceMessageHeader header;
  header.kind = DeviceMessageHeader::kInline;
  header.bytes = 100;
  DeviceP2p::Outgoing message = Message(header, 100);
  bool inline_bytes = false;
  ASSERT_OK(Deliver(message, 100, &inline_bytes));
  EXPECT_TRUE(inline_bytes);
  const std::vector<uint8_t> got = Received(100);
  for (uint8_t b : got) ASSERT_EQ(b, 0x5A);
  EXPECT_EQ(p2p_->mappings_opened(), 0);
}

TEST_F(DeviceP2pTest, ATensorPastTheAllocationOrAWrappingOffsetIsRefused) {
  const uint64_t huge = std::numeric_limits<uint64_t>::max() - 10;
  for (const auto& [offset, bytes] :
       std::vector<std::pair<uint64_t, uint64_t>>{{4000, 256}, {kAllocation + 1, 1}, {huge, 256}}) {
    DeviceP2p::Outgoing message = Message(Ipc(offset, bytes));
    bool inline_bytes = false;
    const absl::Status status = Deliver(message, bytes, &inline_bytes);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << offset << ": " << status;
    EXPECT_THAT(status.message(), ::testing::HasSubstr("rank 3")) << status;
    // Nothing read it: not kept mapped (the sender pins nothing for it).
    EXPECT_EQ(p2p_->mappings_kept(), 0u);
  }
}

// One mapping per peer here: a second allocation of the same peer closes
// the first, and the answer names it; another peer's does not.
TEST_F(DeviceP2pTest, AMappingClosedToMakeRoomIsNamedInTheAnswer) {
  DeviceP2p::Outgoing first = Message(Ipc(0, 256));
  bool inline_bytes = true;
  ASSERT_OK(Deliver(first, 256, &inline_bytes));
  EXPECT_EQ(answer_.flags & DeviceAck::kEvicted, 0u);
  DeviceMessageHeader header = Ipc(64, 256);
  header.handle = exporter_.second();
  header.sequence = 1;
  DeviceP2p::Outgoing second = Message(header);
  ASSERT_OK(Deliver(second, 256, &inline_bytes));
  EXPECT_EQ(answer_.sequence, 1u);
  ASSERT_NE(answer_.flags & DeviceAck::kEvicted, 0u);
  EXPECT_EQ(answer_.evicted.bytes, exporter_.handle().bytes);
  EXPECT_EQ(Received(256)[0], Pattern(64));
  // The first allocation again, as another peer's: its own mapping.
  DeviceP2p::Outgoing again = Message(Ipc(0, 256));
  ASSERT_OK(Deliver(again, 256, &inline_bytes, /*peer=*/4));
  EXPECT_EQ(answer_.flags & DeviceAck::kEvicted, 0u);
  EXPECT_EQ(p2p_->mappings_kept(), 2u);
  EXPECT_EQ(p2p_->mappings_opened(), 3);
}

// The sender's side of the answers: a tensor pinned per peer and
// allocation while the peer maps it, let go when the peer says it closed
// it; an answer to another message refused.
TEST_F(DeviceP2pTest, TheSenderPinsWhatAPeerMapsUntilItClosesIt) {
  DeviceP2p::Outgoing sent;
  sent.handle = exporter_.handle();
  sent.sequence = 5;
  const at::Tensor tensor = at::ones({4});
  DeviceAck answer;
  answer.sequence = 5;
  ASSERT_OK(p2p_->Answered(/*peer=*/1, sent, answer, tensor));
  EXPECT_EQ(p2p_->pinned(), 1u);
  ASSERT_OK(p2p_->Answered(/*peer=*/2, sent, answer, tensor));
  EXPECT_EQ(p2p_->pinned(), 2u);
  // The same allocation again: the newer tensor replaces the pin.
  ASSERT_OK(p2p_->Answered(/*peer=*/1, sent, answer, at::zeros({2})));
  EXPECT_EQ(p2p_->pinned(), 2u);
  // Peer 1 closed it: let go.
  DeviceP2p::Outgoing other;
  other.handle = exporter_.second();
  other.sequence = 6;
  answer.sequence = 6;
  answer.flags = DeviceAck::kEvicted;
  answer.evicted = exporter_.handle();
  ASSERT_OK(p2p_->Answered(/*peer=*/1, other, answer, tensor));
  EXPECT_EQ(p2p_->pinned(), 2u);  // peer 1's second, peer 2's first
  // An answer echoing another message's sequence.
  answer.flags = 0;
  answer.sequence = 9;
  EXPECT_EQ(p2p_->Answered(/*peer=*/1, other, answer, tensor).code(),
            absl::StatusCode::kDataLoss);
  // Inline messages pin nothing.
  DeviceP2p::Outgoing inline_message;
  inline_message.inline_bytes = true;
  inline_message.sequence = 9;
  ASSERT_OK(p2p_->Answered(/*peer=*/3, inline_message, answer, tensor));
  EXPECT_EQ(p2p_->pinned(), 2u);
}

TEST_F(DeviceP2pTest, ForgedMessagesAreRefusedNamingThePeer) {
  struct Case {
    const char* what;
    DeviceMessageHeader header;
    size_t extra = 0;
    size_t expected = 256;
    size_t cut = 0;  // bytes cut off the end of the message
  };
  std::vector<Case> cases;
  DeviceMessageHeader good = Ipc(0, 256);
  cases.push_back({"too short", good, 0, 256, 1});
  DeviceMessageHeader magic = good;
  magic.magic ^= 1;
  cases.push_back({"another magic", magic});
  DeviceMessageHeader version = good;
  version.version = DeviceMessageHeader::kVersion + 1;
  cases.push_back({"another version", version});
  DeviceMessageHeader kind = good;
  kind.kind = 7;
  cases.push_back({"an unknown kind", kind});
  cases.push_back({"a size that is not the receive's", good, 0, 255});
  cases.push_back({"an IPC message with bytes after it", good, 16});
  DeviceMessageHeader short_inline = good;
  short_inline.kind = DeviceMessageHeader::kInline;
  cases.push_back({"inline bytes that do not fill the message", short_inline, 255});
  cases.push_back({"inline bytes past the message's", short_inline, 257});
  for (Case& c : cases) {
    DeviceP2p::Outgoing message = Message(c.header, c.extra);
    bool inline_bytes = false;
    DeviceAck answer;
    const absl::Status status =
        p2p_->Deliver(/*peer=*/3, message, message.size - c.cut, dst_.data(), c.expected,
                      absl::Now() + absl::Seconds(30), answer, &inline_bytes);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.what << ": " << status;
    EXPECT_THAT(status.message(), ::testing::HasSubstr("rank 3")) << c.what << ": " << status;
  }
  EXPECT_EQ(p2p_->mappings_opened(), 0);
}

TEST_F(DeviceP2pTest, AHandleThatNamesNothingIsRefused) {
  DeviceMessageHeader header = Ipc(0, 256);
  for (size_t i = 0; i < header.handle.bytes.size(); ++i) {
    header.handle.bytes[i] = static_cast<uint8_t>(i * 31 + 1);
  }
  DeviceP2p::Outgoing message = Message(header);
  bool inline_bytes = false;
  const absl::Status status = Deliver(message, 256, &inline_bytes);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), ::testing::HasSubstr("rank 3")) << status;
  EXPECT_EQ(p2p_->mappings_kept(), 0u);
}

}  // namespace
}  // namespace rdmaflow::torch_backend
