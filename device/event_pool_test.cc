// EventPool (device/event_pool.h) on the fake device: an event given back
// is the one taken next, a null one is not pooled, and an empty pool makes
// new events.
#include "device/event_pool.h"

#include <memory>

#include "common/status_matchers.h"
#include "device/fake/fake_device.h"
#include "gtest/gtest.h"

namespace rdmaflow::device {
namespace {

TEST(EventPoolTest, ReusesWhatIsGivenBackAndDropsNull) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<FakeDevice> device, FakeDevice::Create(FakeDeviceOptions{}));
  EventPool events(*device);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Event> first, events.Take());
  ASSERT_NE(first, nullptr);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Event> second, events.Take());
  EXPECT_NE(second.get(), first.get()) << "an empty pool handed out an event in use";
  const Event* given = first.get();
  events.Give(std::move(first));
  events.Give(nullptr);
  EXPECT_EQ(events.free(), 1u) << "a null event was pooled";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Event> again, events.Take());
  EXPECT_EQ(again.get(), given);
  EXPECT_EQ(events.free(), 0u);
}

}  // namespace
}  // namespace rdmaflow::device
