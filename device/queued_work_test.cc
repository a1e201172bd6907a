// QueuedWork (device/queued_work.h) on the fake device: work marked by its
// event; work whose Record failed (waited for through the stream, or
// marked by a Record tried again); no event at all; a move; and a stream
// that broke.
#include "device/queued_work.h"

#include <limits>
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
using ::testing::AllOf;
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

// Every Record fails, the copy runs all the same: it has ended only once
// the stream says so, never before.
TEST(QueuedWorkTest, WorkNoRecordMarksEndsWhenItsStreamGoesIdle) {
  FakeDeviceOptions options;
  options.fault = absl::InternalError("cudaEventRecord (injected)");
  Fixture f(options);
  ASSERT_TRUE(f.ok());
  QueuedWork copy;
  f.device->Pause();
  const absl::Status queued = f.stream->Copy(f.memory.data(), f.host.data(), 64);
  f.device->FailRecords(std::numeric_limits<int>::max());
  const absl::Status marked = copy.Mark(*f.stream, std::move(f.event));
  const absl::StatusOr<bool> while_paused = copy.Ended();
  const absl::Status short_wait = copy.WaitUntil(absl::Now() + absl::Milliseconds(5), "the copy");
  const bool unmarked = copy.unmarked();
  f.device->Resume();
  ASSERT_OK(queued);
  EXPECT_THAT(marked, StatusIs(absl::StatusCode::kInternal, HasSubstr("injected")));
  EXPECT_TRUE(copy.pending());
  EXPECT_TRUE(unmarked) << "a Record passed";
  EXPECT_THAT(while_paused, IsOkAndHolds(false)) << "ended with its copy still queued";
  EXPECT_THAT(short_wait,
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("the copy did not complete"), HasSubstr("idle"))));
  ASSERT_OK(copy.WaitUntil(absl::Now() + kTimeout, "the copy"));
  EXPECT_TRUE(copy.unmarked()) << "a Record passed";
  EXPECT_EQ(f.last(), 'q');
  f.device->FailRecords(0);
  EXPECT_EQ(copy.Release(), nullptr) << "an event no Record of passed went back for reuse";
  EXPECT_FALSE(copy.unmarked());
  EXPECT_FALSE(copy.pending());
}

// One Record fails: the next Ended() records the event again, after the
// copy, and the event says from then on.
TEST(QueuedWorkTest, ARecordTriedAgainMarksTheWork) {
  Fixture f;
  ASSERT_TRUE(f.ok());
  QueuedWork copy;
  f.device->Pause();
  const absl::Status queued = f.stream->Copy(f.memory.data(), f.host.data(), 64);
  f.device->FailRecords(1);
  const absl::Status marked = copy.Mark(*f.stream, std::move(f.event));
  const bool unmarked_at_first = copy.unmarked();
  const absl::StatusOr<bool> while_paused = copy.Ended();
  const bool unmarked_then = copy.unmarked();
  f.device->Resume();
  ASSERT_OK(queued);
  EXPECT_FALSE(marked.ok());
  EXPECT_TRUE(unmarked_at_first);
  EXPECT_THAT(while_paused, IsOkAndHolds(false)) << "ended with its copy still queued";
  EXPECT_FALSE(unmarked_then) << "the Record was not tried again";
  ASSERT_OK(copy.WaitUntil(absl::Now() + kTimeout, "the copy"));
  EXPECT_EQ(f.last(), 'q');
  EXPECT_NE(copy.Release(), nullptr) << "an event a Record passed on is good for reuse";
}

// No event could be made: the work is watched through the stream.
TEST(QueuedWorkTest, WorkWithNoEventEndsWhenItsStreamGoesIdle) {
  Fixture f;
  ASSERT_TRUE(f.ok());
  QueuedWork copy;
  f.device->Pause();
  const absl::Status queued = f.stream->Copy(f.memory.data(), f.host.data(), 64);
  const absl::Status marked = copy.Mark(*f.stream, nullptr);
  const absl::StatusOr<bool> while_paused = copy.Ended();
  f.device->Resume();
  ASSERT_OK(queued);
  EXPECT_THAT(marked, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(while_paused, IsOkAndHolds(false));
  ASSERT_OK(copy.WaitUntil(absl::Now() + kTimeout, "the copy"));
  EXPECT_EQ(f.last(), 'q');
  EXPECT_EQ(copy.Release(), nullptr);
  EXPECT_FALSE(copy.pending());
}

// Moved, the work goes with it: the moved-from object has none.
TEST(QueuedWorkTest, AMoveTakesTheWork) {
  Fixture f;
  ASSERT_TRUE(f.ok());
  QueuedWork first;
  ASSERT_OK(f.stream->Copy(f.memory.data(), f.host.data(), 64));
  f.device->FailRecords(1);
  EXPECT_FALSE(first.Mark(*f.stream, std::move(f.event)).ok());
  QueuedWork second(std::move(first));
  EXPECT_TRUE(second.unmarked());
  EXPECT_FALSE(first.pending());   // NOLINT(bugprone-use-after-move): what a move leaves
  EXPECT_FALSE(first.unmarked());  // NOLINT(bugprone-use-after-move)
  QueuedWork third;
  third = std::move(second);
  EXPECT_TRUE(third.pending());
  EXPECT_FALSE(second.unmarked());  // NOLINT(bugprone-use-after-move)
  ASSERT_OK(third.WaitUntil(absl::Now() + kTimeout, "the copy"));
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
    if (fail_record) f.device->FailRecords(1);
    EXPECT_EQ(copy.Mark(*f.stream, std::move(f.event)).ok(), !fail_record);
    EXPECT_THAT(copy.WaitUntil(absl::Now() + kTimeout, "the copy"),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("ECC")))
        << (fail_record ? "unmarked" : "marked");
  }
}

}  // namespace
}  // namespace rdmaflow::device
