// The executor's link layout names where each tensor lies, not only the
// link's totals: two plans whose slots have the same sizes in another order
// differ, the same plan does not.
#include "runtime/link_records.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace rdmaflow::runtime {
namespace {

plan::LinkRegion TwoSlots(const char* first, const char* second) {
  plan::LinkRegion link;
  link.set_src_rank(0);
  link.set_dst_rank(1);
  link.set_alignment(64);
  link.set_stage_bytes(128);
  link.set_depth(2);
  link.set_region_bytes(256);
  for (int i = 0; i < 2; ++i) {
    plan::TensorSlot* slot = link.add_slot();
    slot->set_id(i);
    slot->set_tensor(i == 0 ? first : second);
    slot->set_offset(64 * i);
    slot->set_bytes(64);
  }
  return link;
}

TEST(LinkRecordsTest, TheExecutorLayoutTellsSlotMapsApart) {
  const std::string ab = ExecutorLinkLayout(TwoSlots("a", "b"));
  EXPECT_EQ(ab, ExecutorLinkLayout(TwoSlots("a", "b")));
  EXPECT_NE(ab, ExecutorLinkLayout(TwoSlots("b", "a")));
  plan::LinkRegion moved = TwoSlots("a", "b");
  moved.mutable_slot(1)->set_offset(0);
  moved.mutable_slot(0)->set_offset(64);
  EXPECT_NE(ab, ExecutorLinkLayout(moved));
  EXPECT_TRUE(absl::StrContains(ab, "0->1 slots=2 depth=2 stage=128 host=256")) << ab;
  EXPECT_EQ(ExecutorLinkScope(3, moved), "executor/g3/0-1");
}

}  // namespace
}  // namespace rdmaflow::runtime
