// File: codec_test.cc
// Every codec, driven through its rounds in memory (testing/local_exchange.h):
// error feedback conserves the gradient, each codec chooses what it says it
// chooses, a forged peer value is refused, and a bad spec is a named error.
#include "compression/codec.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "collectives/reduce.h"
#include "common/status_matchers.h"
#include "compression/testing/local_exchange.h"
#include "gtest/gtest.h"

namespace rdmaflow::compression {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;
using testing::RunLocalStep;

std::vector<float> Gaussian(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

std::vector<std::unique_ptr<Codec>> Make(const std::string& spec, int members, size_t count) {
  std::vector<std::unique_ptr<Codec>> codecs;
  for (int m = 0; m < members; ++m) {
    auto codec = CreateCodec(spec, CodecContext{m, members, 42}, count);
    EXPECT_TRUE(codec.ok()) << codec.status();
    codecs.push_back(std::move(codec).value());
  }
  return codecs;
}

std::vector<Codec*> Raw(const std::vector<std::unique_ptr<Codec>>& codecs) {
  std::vector<Codec*> raw;
  for (const auto& c : codecs) raw.push_back(c.get());
  return raw;
}

const char* const kSpecs[] = {
    "topk:ratio=0.05",  "topk:ratio=0.05,sampled=1", "randomk:ratio=0.05",
    "int8:bucket=64",   "sketch:rows=5,cols=200,k=40",
};

// Over the steps, what the members received (the decoded sums) plus what
// they still hold equals everything they put in.
TEST(CodecTest, ErrorFeedbackConservesTheGradient) {
  for (const char* spec : kSpecs) {
    SCOPED_TRACE(spec);
    const int members = 3;
    const size_t count = 1000;
    auto codecs = Make(spec, members, count);
    std::vector<double> put_in(count, 0.0), received(count, 0.0);
    for (uint64_t step = 0; step < 20; ++step) {
      std::vector<std::vector<float>> gradients;
      for (int m = 0; m < members; ++m) {
        gradients.push_back(Gaussian(count, static_cast<uint32_t>(step * 10 + m)));
        for (size_t i = 0; i < count; ++i) put_in[i] += gradients[m][i];
      }
      auto out = RunLocalStep(Raw(codecs), gradients, step);
      ASSERT_TRUE(out.ok()) << out.status();
      for (size_t i = 0; i < count; ++i) {
        received[i] += (*out)[0][i];
        // Every member decodes the same sum.
        ASSERT_EQ((*out)[0][i], (*out)[members - 1][i]) << i;
      }
    }
    double worst = 0;
    for (size_t i = 0; i < count; ++i) {
      double held = 0;
      for (const auto& c : codecs) held += c->residual()[i];
      worst = std::max(worst, std::fabs(received[i] + held - put_in[i]));
    }
    EXPECT_LT(worst, 1e-3);
  }
}

TEST(CodecTest, WithoutFeedbackNothingIsKept) {
  auto codecs = Make("topk:ratio=0.1,feedback=0", 1, 100);
  ASSERT_TRUE(RunLocalStep(Raw(codecs), {Gaussian(100, 1)}, 0).ok());
  auto out = RunLocalStep(Raw(codecs), {Gaussian(100, 2)}, 1);
  ASSERT_TRUE(out.ok());
  // The second step sends the second gradient's top 10, not the first's leftovers.
  const std::vector<float> g = Gaussian(100, 2);
  int sent = 0;
  for (size_t i = 0; i < 100; ++i) {
    if ((*out)[0][i] != 0) {
      EXPECT_EQ((*out)[0][i], g[i]);
      ++sent;
    }
  }
  EXPECT_EQ(sent, 10);
}

TEST(TopKCodecTest, SendsExactlyTheKLargestMagnitudes) {
  const size_t count = 5000;
  auto codecs = Make("topk:ratio=0.01", 1, count);
  const std::vector<float> g = Gaussian(count, 9);
  auto out = RunLocalStep(Raw(codecs), {g}, 0);
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<float> magnitudes;
  for (float x : g) magnitudes.push_back(std::fabs(x));
  std::nth_element(magnitudes.begin(), magnitudes.begin() + 49, magnitudes.end(),
                   std::greater<float>());
  const float cut = magnitudes[49];
  int sent = 0;
  for (size_t i = 0; i < count; ++i) {
    if ((*out)[0][i] != 0) {
      ++sent;
      EXPECT_EQ((*out)[0][i], g[i]);
      EXPECT_GE(std::fabs(g[i]), cut);
      EXPECT_EQ(codecs[0]->residual()[i], 0.0f);
    } else {
      EXPECT_LT(std::fabs(g[i]), cut);
      EXPECT_EQ(codecs[0]->residual()[i], g[i]);
    }
  }
  EXPECT_EQ(sent, 50);
}

TEST(TopKCodecTest, SumsTheMembersPairsScaled) {
  auto codecs = Make("topk:ratio=0.25", 2, 4);
  auto out = RunLocalStep(Raw(codecs), {{0, 8, 0, 1}, {2, 0, 0, 4}}, 0,
                          testing::LocalExchangeOptions{0.5f, nullptr});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[1], (std::vector<float>{0, 4, 0, 2}));
}

TEST(RandomKCodecTest, MembersDrawTheSameIndicesAndStepsDrawOthers) {
  const size_t count = 1000;
  auto codecs = Make("randomk:ratio=0.02", 2, count);
  std::vector<float> ones(count, 1.0f);
  auto first = RunLocalStep(Raw(codecs), {ones, ones}, 0);
  ASSERT_TRUE(first.ok());
  int sent = 0;
  for (size_t i = 0; i < count; ++i) {
    if ((*first)[0][i] != 0) {
      EXPECT_EQ((*first)[0][i], 2.0f);  // both members' value at the same index
      ++sent;
    }
  }
  EXPECT_EQ(sent, 20);
  auto second = RunLocalStep(Raw(codecs), {ones, ones}, 1);
  ASSERT_TRUE(second.ok());
  EXPECT_NE((*first)[0], (*second)[0]);
}

TEST(Int8CodecTest, EachMembersErrorIsBelowOneLevel) {
  const size_t count = 4096;
  const int members = 4;
  auto codecs = Make("int8:bucket=256,feedback=0", members, count);
  std::vector<std::vector<float>> gradients;
  std::vector<float> sum(count, 0.0f);
  float largest = 0;
  for (int m = 0; m < members; ++m) {
    gradients.push_back(Gaussian(count, 100 + m));
    for (size_t i = 0; i < count; ++i) {
      sum[i] += gradients[m][i];
      largest = std::max(largest, std::fabs(gradients[m][i]));
    }
  }
  auto out = RunLocalStep(Raw(codecs), gradients, 0);
  ASSERT_TRUE(out.ok()) << out.status();
  double mean_error = 0;
  for (size_t i = 0; i < count; ++i) {
    ASSERT_LE(std::fabs((*out)[0][i] - sum[i]), members * largest / 127.0f + 1e-5f) << i;
    mean_error += (*out)[0][i] - sum[i];
  }
  // Stochastic rounding is unbiased: the errors cancel on average.
  EXPECT_LT(std::fabs(mean_error / count), 0.01);
}

TEST(Int8CodecTest, RefusesAForgedScaleOrLevelSum) {
  auto codecs = Make("int8:bucket=8", 2, 64);
  const std::vector<std::vector<float>> g = {Gaussian(64, 1), Gaussian(64, 2)};
  testing::LocalExchangeOptions nan_scale;
  nan_scale.tamper = [](int round, int member, absl::Span<std::byte> scratch, auto&) {
    if (round == 0 && member == 1) reinterpret_cast<float*>(scratch.data())[3] = NAN;
  };
  EXPECT_THAT(RunLocalStep(Raw(codecs), g, 0, nan_scale).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("bucket 3's scale")));
  auto fresh = Make("int8:bucket=8", 2, 64);
  testing::LocalExchangeOptions big_levels;
  big_levels.tamper = [](int round, int member, absl::Span<std::byte> scratch, auto&) {
    if (round == 1 && member == 0) {
      uint16_t* levels = reinterpret_cast<uint16_t*>(scratch.data() + 64);
      levels[5] = collectives::FloatToHalf(1000.0f);
    }
  };
  EXPECT_THAT(RunLocalStep(Raw(fresh), g, 0, big_levels).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("element 5's level sum")));
}

// A scale agreed so small that its levels would overflow float (a forged
// one, or tiny gradients): the bucket is not sent, nothing is cast from NaN.
TEST(Int8CodecTest, ABucketWhoseLevelsWouldOverflowIsKeptForLater) {
  auto codecs = Make("int8:bucket=8", 2, 64);
  const std::vector<std::vector<float>> g = {Gaussian(64, 1), Gaussian(64, 2)};
  testing::LocalExchangeOptions tiny_scale;
  tiny_scale.tamper = [](int round, int, absl::Span<std::byte> scratch, auto&) {
    if (round == 0) reinterpret_cast<float*>(scratch.data())[2] = 1e-38f;
  };
  auto out = RunLocalStep(Raw(codecs), g, 0, tiny_scale);
  ASSERT_TRUE(out.ok()) << out.status();
  for (int i = 16; i < 24; ++i) {
    EXPECT_EQ((*out)[0][i], 0.0f) << i;
    EXPECT_EQ(codecs[0]->residual()[i], g[0][i]) << i;
  }
}

TEST(SketchCodecTest, RecoversPlantedHeavyHittersExactly) {
  const size_t count = 20000;
  const int members = 3;
  // A noise element's estimate is a heavy hitter's when it shares its bucket
  // in 3 of the 5 rows: about C(5,3) (20/cols)^3 of 20000 elements, 0.2 at
  // 2000 counters a row (25 at 400).
  auto codecs = Make("sketch:rows=5,cols=2000,k=20,feedback=0", members, count);
  std::vector<std::vector<float>> gradients;
  std::vector<float> sum(count, 0.0f);
  std::vector<uint32_t> planted;
  for (uint32_t j = 0; j < 20; ++j) planted.push_back(j * 997 + 13);
  for (int m = 0; m < members; ++m) {
    std::vector<float> g = Gaussian(count, 50 + m, 0.001f);
    for (size_t j = 0; j < planted.size(); ++j) {
      g[planted[j]] += (j % 2 ? -1.0f : 1.0f) * (5.0f + j);
    }
    for (size_t i = 0; i < count; ++i) sum[i] += g[i];
    gradients.push_back(std::move(g));
  }
  auto out = RunLocalStep(Raw(codecs), gradients, 0);
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<uint32_t> found;
  for (uint32_t i = 0; i < count; ++i) {
    if ((*out)[0][i] != 0) {
      found.push_back(i);
      EXPECT_FLOAT_EQ((*out)[0][i], sum[i]);  // the exact second round
    }
  }
  EXPECT_EQ(found, planted);
}

TEST(CodecTest, ABadSpecIsANamedError) {
  const std::pair<const char*, const char*> bad[] = {
      {"zip", "unknown gradient codec 'zip'"},
      {"topk:ratio=0", "topk ratio must be a number in"},
      {"topk:ratio=2", "topk ratio must be a number in"},
      {"topk:sampled=2", "sampled 0 or 1"},
      {"topk:rate=0.1", "unknown topk parameter 'rate'; known: feedback, ratio, sampled"},
      {"topk:ratio", "topk setting 'ratio' is not of the form key=value"},
      {"randomk:feedback=2", "feedback must be 0 or 1"},
      {"int8:bucket=0", "int8 bucket must be an integer >= 1"},
      {"sketch:rows=100", "sketch needs rows <= 64"},
      {"sketch:k=x", "sketch k must be an integer"},
  };
  for (const auto& [spec, message] : bad) {
    EXPECT_THAT(ValidateCodecSpec(spec),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(message)))
        << spec;
  }
  for (const char* spec : kSpecs) EXPECT_TRUE(ValidateCodecSpec(spec).ok()) << spec;
  // A k beyond a small tensor takes all of it.
  auto small = CreateCodec("sketch:k=50", CodecContext{}, 10);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_THAT((*small)->spec(), HasSubstr(",k=10,"));
  EXPECT_THAT(ValidateCodecSpec("sketch:rows=4294967295"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sketch rows must be")));
  EXPECT_THAT(ValidateCodecSpec("topk:feedback=4294967296"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("feedback must be")));
  EXPECT_THAT(CreateCodec("topk", CodecContext{2, 2, 0}, 10).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("member 2 of 2")));
  EXPECT_THAT(CreateCodec("topk", CodecContext{}, 0).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("0 elements")));
}

TEST(CodecTest, SpecReadsBackAsTheSameCodec) {
  for (const char* spec : kSpecs) {
    auto codec = CreateCodec(spec, CodecContext{}, 1000);
    ASSERT_TRUE(codec.ok());
    auto again = CreateCodec((*codec)->spec(), CodecContext{}, 1000);
    ASSERT_TRUE(again.ok()) << (*codec)->spec();
    EXPECT_EQ((*again)->spec(), (*codec)->spec());
    EXPECT_EQ((*again)->scratch_bytes(), (*codec)->scratch_bytes());
  }
}

TEST(CodecTest, CallsOutOfOrderOrWithWrongSizesAreRefused) {
  auto codec = std::move(CreateCodec("topk", CodecContext{}, 100).value());
  std::vector<std::byte> scratch(codec->scratch_bytes());
  std::vector<float> g(100, 1.0f), out(100);
  EXPECT_THAT(codec->Next(absl::MakeSpan(scratch), {}, absl::MakeSpan(out), 1).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("call Begin() first")));
  EXPECT_THAT(codec->Begin(absl::MakeSpan(g).subspan(1), 0, absl::MakeSpan(scratch)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("99 elements")));
  ASSERT_TRUE(codec->Begin(g, 0, absl::MakeSpan(scratch)).ok());
  EXPECT_THAT(codec->Begin(g, 1, absl::MakeSpan(scratch)).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("under way")));
  // An all-gather round needs one message per member.
  EXPECT_THAT(codec->Next(absl::MakeSpan(scratch), {}, absl::MakeSpan(out), 1).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("0 gathered messages")));
}

}  // namespace
}  // namespace rdmaflow::compression
