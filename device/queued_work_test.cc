// QueuedWork (device/queued_work.h) on the fake device: work marked by its
// event, work whose Record failed (waited for through the stream), and a
// stream that broke.
#include "device/queued_work.h"

#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "device/fake/fake_device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::device {
namespace {

using ::rdmaflow::testing::IsOk;
using ::rdmaflow::testing::IsOkAndHolds;
using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(30);

struct Fixture {
  explicit Fixture(const FakeDeviceOptions& options = {}) {
    absl::StatusOr<std::unique_ptr<FakeDevice>> made = FakeDevice::Create(options);
    EXPECT_THAT(made, IsOk());
    if (!made.ok()) return;
    device = *std::move(made);
    absl::StatusOr<std::unique_ptr<Stream>> s = device->CreateStream();
    absl::StatusOr<std::unique_ptr<Event>> e = device->CreateEvent();
    absl::StatusOr<DeviceMemory> m = device->Allocate(64);
    EXPECT_THAT(s, IsOk());
    EXPECT_THAT(e, IsOk());
    EXPECT_THAT(m, IsOk());
    if (s.ok()) stream = *std::move(s);
    if (e.ok()) event = *std::move(e);
    if (m.ok()) memory = *std::move(m);
  }
  bool ok() const { return stream != nullptr && event != nullptr && memory.data() != nullptr; }
  char last() const { return static_cast<const char*>(memory.data())[63]; }

  std::unique_ptr<FakeDevice> device;
  std::vector<char> host = std::vector<char>(64, 'q');  // outlives the copies
  std::unique_ptr<Stream> stream;
  std::unique_ptr<Event> event;
  DeviceMemory memory;
};

TEST(QueuedWorkTest, NoWorkHasEnded) {
  QueuedWork none;
  EXPECT_FALSE(none.pending());
  EXPECT_THAT(none.Ended(), IsOkAndHolds(true));
  EXPECT_OK(none.WaitUntil(absl::Now(), "nothing"));
  EXPECT_EQ(none.Release(), nullptr);
}

TEST(QueuedWorkTest, MarkedWorkEndsWithItsEvent) {
  Fixture f;
  ASSERT_TRUE(f.ok());
  QueuedWork copy;
  // Nothing fails while paused, so that the device always resumes.
  f.device->Pause();
  const absl::Status queued = f.stream->Copy(f.memory.data(), f.host.data(), 64);
  const absl::Status marked = copy.Mark(*f.stream, std::move(f.event));
  const absl::StatusOr<bool> while_paused = copy.Ended();
  f.device->Resume();
  ASSERT_OK(queued);
  ASSERT_OK(marked);
  EXPECT_TRUE(copy.pending());
  EXPECT_FALSE(copy.unmarked());
  EXPECT_THAT(while_paused, IsOkAndHolds(false));
  ASSERT_OK(copy.WaitUntil(absl::Now() + kTimeout, "the copy"));
  EXPECT_EQ(f.last(), 'q');
  EXPECT_NE(copy.Release(), nullptr) << "the event comes back for reuse";
  EXPECT_FALSE(copy.pending());
}

// The Record fails, the copy runs all the same: it has ended only once the
// stream says so, never before.
TEST(QueuedWorkTest, WorkWhoseRecordFailedEndsWhenItsStreamGoesIdle) {
  FakeDeviceOptions options;
  options.fault = absl::InternalError("cudaEventRecord (injected)");
  Fixture f(options);
  ASSERT_TRUE(f.ok());
  QueuedWork copy;
  f.device->Pause();
  const absl::Status queued = f.stream->Copy(f.memory.data(), f.host.data(), 64);
  f.device->FailNextRecord();
  const absl::Status marked = copy.Mark(*f.stream, std::move(f.event));
  const absl::StatusOr<bool> while_paused = copy.Ended();
  const absl::Status short_wait = copy.WaitUntil(absl::Now() + absl::Milliseconds(5), "the copy");
  f.device->Resume();
  ASSERT_OK(queued);
  EXPECT_THAT(marked, StatusIs(absl::StatusCode::kInternal, HasSubstr("injected")));
  EXPECT_TRUE(copy.pending());
  EXPECT_TRUE(copy.unmarked());
  EXPECT_THAT(while_paused, IsOkAndHolds(false)) << "ended with its copy still queued";
  EXPECT_THAT(short_wait, StatusIs(absl::StatusCode::kDeadlineExceeded,
                                   HasSubstr("the copy did not complete")));
  ASSERT_OK(copy.WaitUntil(absl::Now() + kTimeout, "the copy"));
  EXPECT_EQ(f.last(), 'q');
  EXPECT_NE(copy.Release(), nullptr);
  EXPECT_FALSE(copy.unmarked());
}

// A broken stream ends its work with its error, marked or not.
TEST(QueuedWorkTest, AFailedStreamEndsItsWorkWithItsError) {
  FakeDeviceOptions options;
  options.fail_operation = 1;
  options.fault = absl::DataLossError("ECC error (injected)");
  for (const bool fail_record : {false, true}) {
    Fixture f(options);
    ASSERT_TRUE(f.ok());
    QueuedWork copy;
    ASSERT_OK(f.stream->Copy(f.memory.data(), f.host.data(), 64));
    if (fail_record) f.device->FailNextRecord();
    EXPECT_EQ(copy.Mark(*f.stream, std::move(f.event)).ok(), !fail_record);
    EXPECT_THAT(copy.WaitUntil(absl::Now() + kTimeout, "the copy"),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("ECC")))
        << (fail_record ? "unmarked" : "marked");
  }
}

}  // namespace
}  // namespace rdmaflow::device
