// File: shape_util_test.cc
#include "graph_analyzer/shape_util.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "graph_analyzer/tensor_ref.h"
#include "gtest/gtest.h"

namespace rdmaflow::graph {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ShapeUtilTest, BytesOfKnownAndUnknownShapes) {
  EXPECT_EQ(NumBytes(MakeSpec(DT_FLOAT32, {32, 784})), 32 * 784 * 4);
  EXPECT_EQ(NumBytes(MakeSpec(DT_BFLOAT16, {})), 2);
  EXPECT_EQ(NumBytes(MakeSpec(DT_FLOAT32, {-1, 784})), std::nullopt);
  EXPECT_EQ(NumBytes(MakeSpec(DT_INVALID, {4})), std::nullopt);
  // 2^40 * 2^40 elements overflow int64.
  EXPECT_EQ(NumBytes(MakeSpec(DT_INT8, {kMaxDim, kMaxDim})), std::nullopt);
}

TEST(ShapeUtilTest, CheckSpec) {
  EXPECT_OK(CheckSpec(MakeSpec(DT_FLOAT32, {-1, 3})));
  EXPECT_THAT(CheckSpec(MakeSpec(DT_FLOAT32, {kMaxDim + 1})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("exceeds 2^40")));
  EXPECT_THAT(CheckSpec(MakeSpec(DT_FLOAT64, {kMaxDim, kMaxDim})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("overflows")));
  EXPECT_THAT(CheckSpec(MakeSpec(static_cast<DataType>(77), {1})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("invalid dtype 77")));
}

TEST(ShapeUtilTest, Printing) {
  EXPECT_EQ(SpecString(MakeSpec(DT_INT64, {2, -1})), "int64[2, -1]");
  EXPECT_EQ(SpecString(MakeSpec(DT_BOOL, {})), "bool[]");
}

TEST(TensorRefTest, ParsesNodeAndIndex) {
  ASSERT_OK_AND_ASSIGN(TensorRef a, ParseTensorRef("layer/1"));
  EXPECT_EQ(a.node, "layer/1");
  EXPECT_EQ(a.output, 0);
  ASSERT_OK_AND_ASSIGN(TensorRef b, ParseTensorRef("split:2"));
  EXPECT_EQ(b.node, "split");
  EXPECT_EQ(b.output, 2);
  EXPECT_EQ(b.ToString(), "split:2");
  for (const char* bad : {"", ":1", "x:", "x:-1", "x:1a", "x:9999999999"}) {
    EXPECT_THAT(ParseTensorRef(bad),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << bad;
  }
}

TEST(ShapeUtilTest, ParsesSpecTextAndNamesWhatIsWrong) {
  ASSERT_OK_AND_ASSIGN(TensorSpec spec, ParseSpecText("64x1x28x28"));
  EXPECT_EQ(SpecString(spec), "float32[64, 1, 28, 28]");
  ASSERT_OK_AND_ASSIGN(spec, ParseSpecText("8x16:int64"));
  EXPECT_EQ(SpecString(spec), "int64[8, 16]");
  for (const char* bad : {"", "8x", "x8", "8x-1", "8x0", "8x1099511627777", "8:complex",
                          "8:invalid", "1099511627776x1099511627776"}) {
    EXPECT_THAT(ParseSpecText(bad), StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
}

}  // namespace
}  // namespace rdmaflow::graph
