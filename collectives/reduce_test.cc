// File: reduce_test.cc
#include "collectives/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace rdmaflow::collectives {
namespace {

using ::rdmaflow::testing::StatusIs;

TEST(ReduceTest, EveryOperatorOnFloat32AndInt64) {
  std::vector<float> a = {1, -2, 3, 7}, b = {4, 5, -6, 7};
  std::vector<float> sum = a, prod = a, mn = a, mx = a;
  Reduce(DataType::kFloat32, ReduceOp::kSum, sum.data(), b.data(), 4);
  Reduce(DataType::kFloat32, ReduceOp::kProduct, prod.data(), b.data(), 4);
  Reduce(DataType::kFloat32, ReduceOp::kMin, mn.data(), b.data(), 4);
  Reduce(DataType::kFloat32, ReduceOp::kMax, mx.data(), b.data(), 4);
  EXPECT_EQ(sum, (std::vector<float>{5, 3, -3, 14}));
  EXPECT_EQ(prod, (std::vector<float>{4, -10, -18, 49}));
  EXPECT_EQ(mn, (std::vector<float>{1, -2, -6, 7}));
  EXPECT_EQ(mx, (std::vector<float>{4, 5, 3, 7}));
  std::vector<int64_t> x = {int64_t{1} << 40, -3}, y = {1, 3};
  Reduce(DataType::kInt64, ReduceOp::kSum, x.data(), y.data(), 2);
  EXPECT_EQ(x, (std::vector<int64_t>{(int64_t{1} << 40) + 1, 0}));
}

TEST(ReduceTest, CountLimitsTheElementsTouched) {
  std::vector<double> a = {1, 1, 1}, b = {1, 1, 1};
  Reduce(DataType::kFloat64, ReduceOp::kSum, a.data(), b.data(), 2);
  EXPECT_EQ(a, (std::vector<double>{2, 2, 1}));
}

TEST(ReduceTest, HalfPrecisionSumsInFloatAndRounds) {
  // Integers up to 2048 (float16) and 256 (bfloat16) are exact.
  std::vector<uint16_t> h = {FloatToHalf(1000), FloatToHalf(-3)};
  std::vector<uint16_t> g = {FloatToHalf(1000), FloatToHalf(0.5)};
  Reduce(DataType::kFloat16, ReduceOp::kSum, h.data(), g.data(), 2);
  EXPECT_EQ(HalfToFloat(h[0]), 2000);
  EXPECT_EQ(HalfToFloat(h[1]), -2.5);
  std::vector<uint16_t> bf = {FloatToBFloat16(100), FloatToBFloat16(1)};
  std::vector<uint16_t> bg = {FloatToBFloat16(28), FloatToBFloat16(1.0f / 512)};
  Reduce(DataType::kBFloat16, ReduceOp::kSum, bf.data(), bg.data(), 2);
  EXPECT_EQ(BFloat16ToFloat(bf[0]), 128);
  EXPECT_EQ(BFloat16ToFloat(bf[1]), 1);  // 1 + 2^-9 rounds to even: 1
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(
      FloatToBFloat16(std::numeric_limits<float>::quiet_NaN()))));
}

// The vector kernels (AVX2/F16C where the CPU has them) against the
// element-by-element definition: dst = Narrow(op(Widen(dst), Widen(src))),
// over every kind of 16-bit pattern (normals, subnormals, infinities,
// NaNs) and lengths that leave a scalar tail. Same bits, except that a NaN
// need only stay a NaN.
TEST(ReduceTest, VectorKernelsMatchTheElementwiseDefinitionBitForBit) {
  std::mt19937 random(7);
  const std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMin,
                                     ReduceOp::kMax};
  struct Half {
    DataType type;
    float (*widen)(uint16_t);
    uint16_t (*narrow)(float);
  };
  for (const Half& half : {Half{DataType::kFloat16, HalfToFloat, FloatToHalf},
                           Half{DataType::kBFloat16, BFloat16ToFloat, FloatToBFloat16}}) {
    for (ReduceOp op : ops) {
      SCOPED_TRACE(DataTypeName(half.type) + " " + ReduceOpName(op));
      for (size_t count : {size_t{1}, size_t{7}, size_t{8}, size_t{4099}}) {
        std::vector<uint16_t> dst(count), src(count);
        for (size_t i = 0; i < count; ++i) {
          dst[i] = static_cast<uint16_t>(random());
          src[i] = static_cast<uint16_t>(random());
        }
        std::vector<uint16_t> got = dst;
        Reduce(half.type, op, got.data(), src.data(), count);
        for (size_t i = 0; i < count; ++i) {
          const float a = half.widen(dst[i]), b = half.widen(src[i]);
          const float r = op == ReduceOp::kSum       ? a + b
                          : op == ReduceOp::kProduct ? a * b
                          : op == ReduceOp::kMin     ? std::min(a, b)
                                                     : std::max(a, b);
          const uint16_t want = half.narrow(r);
          if (std::isnan(half.widen(want))) {
            ASSERT_TRUE(std::isnan(half.widen(got[i]))) << "element " << i;
          } else {
            ASSERT_EQ(got[i], want) << "element " << i << " of " << count << ": "
                                    << dst[i] << " and " << src[i];
          }
        }
      }
    }
  }
  for (ReduceOp op : ops) {
    SCOPED_TRACE("float32 " + ReduceOpName(op));
    const size_t count = 1031;
    std::vector<float> dst(count), src(count);
    std::uniform_real_distribution<float> values(-1e6f, 1e6f);
    for (size_t i = 0; i < count; ++i) {
      dst[i] = values(random);
      src[i] = i % 97 == 0 ? std::numeric_limits<float>::quiet_NaN() : values(random);
    }
    std::vector<float> got = dst;
    Reduce(DataType::kFloat32, op, got.data(), src.data(), count);
    for (size_t i = 0; i < count; ++i) {
      const float a = dst[i], b = src[i];
      const float want = op == ReduceOp::kSum       ? a + b
                         : op == ReduceOp::kProduct ? a * b
                         : op == ReduceOp::kMin     ? std::min(a, b)
                                                    : std::max(a, b);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got[i])) << "element " << i;
      } else {
        ASSERT_EQ(got[i], want) << "element " << i;
      }
    }
  }
}

// ReduceMany folds block by block: every type and operator, one, two and
// four sources, sizes that end inside a block, on one and past it, in place and into a
// separate buffer, give the bytes Reduce() gives source after source.
TEST(ReduceTest, ReduceManyMatchesReducingSourceAfterSourceByteForByte) {
  std::mt19937 random(11);
  const std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMin,
                                     ReduceOp::kMax};
  for (const std::string& name : DataTypeNames()) {
    const DataType type = *ParseDataType(name);
    const size_t element = ElementSize(type);
    for (ReduceOp op : ops) {
      for (size_t sources : {size_t{1}, size_t{2}, size_t{4}}) {
        for (size_t count : {size_t{1}, size_t{7}, 4096 / element - 1, 4096 / element,
                             4096 / element + 1, 3 * 4096 / element + 5}) {
          SCOPED_TRACE(name + " " + ReduceOpName(op) + ", " + std::to_string(sources) +
                       " sources, " + std::to_string(count) + " elements");
          const size_t bytes = count * element;
          std::vector<std::vector<std::byte>> data(sources, std::vector<std::byte>(bytes));
          for (auto& source : data) {
            for (std::byte& b : source) b = static_cast<std::byte>(random());
          }
          // Source after source, on a copy of the first.
          std::vector<std::byte> want = data[0];
          for (size_t k = 1; k < sources; ++k) Reduce(type, op, want.data(), data[k].data(), count);
          std::vector<const std::byte*> srcs;
          for (const auto& source : data) srcs.push_back(source.data());
          std::vector<std::byte> out(bytes + 8, std::byte{0x5a});
          ReduceMany(type, op, out.data(), srcs, count);
          ASSERT_TRUE(std::equal(want.begin(), want.end(), out.begin()));
          // Nothing past `count` is written.
          ASSERT_EQ(out[bytes], std::byte{0x5a});
          // In place: the first source is the destination.
          ReduceMany(type, op, data[0].data(), srcs, count);
          ASSERT_TRUE(data[0] == want);
        }
      }
    }
  }
  // No sources, or no elements: nothing written.
  std::vector<std::byte> untouched(16, std::byte{1});
  ReduceMany(DataType::kFloat32, ReduceOp::kSum, untouched.data(), {}, 4);
  const std::byte* one = untouched.data();
  ReduceMany(DataType::kFloat32, ReduceOp::kSum, untouched.data() + 8, {&one, 1}, 0);
  EXPECT_EQ(untouched, std::vector<std::byte>(16, std::byte{1}));
}

TEST(ReduceTest, NamesRoundTripAndUnknownOnesAreListed) {
  for (const std::string& name : DataTypeNames()) {
    ASSERT_OK_AND_ASSIGN(DataType type, ParseDataType(name));
    EXPECT_EQ(DataTypeName(type), name);
  }
  EXPECT_EQ(ElementSize(DataType::kBFloat16), 2u);
  EXPECT_EQ(ElementSize(DataType::kInt64), 8u);
  EXPECT_THAT(ParseDataType("float8"),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("bfloat16")));
  ASSERT_OK_AND_ASSIGN(ReduceOp op, ParseReduceOp("prod"));
  EXPECT_EQ(ReduceOpName(op), "product");
  EXPECT_THAT(ParseReduceOp("avg"), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace rdmaflow::collectives
