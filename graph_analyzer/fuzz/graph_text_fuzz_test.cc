// File: graph_text_fuzz_test.cc
// Runs the fuzz target (fuzz_target.h) over a seed corpus -- the example
// graphs and hand-written edge cases -- and over deterministic mutations of
// it, so every `bazel test` exercises the loader and validator on malformed
// input without libFuzzer. A crash or sanitizer report fails the test; the
// outcome counts check the mutations reach every stage.
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "graph_analyzer/examples/example_graphs.h"
#include "graph_analyzer/fuzz/fuzz_target.h"
#include "graph_analyzer/text_io.h"
#include "gtest/gtest.h"

namespace rdmaflow::graph::fuzz {
namespace {

std::vector<std::string> Seeds() {
  std::vector<std::string> seeds;
  for (const auto& example : examples::AllExamples()) {
    absl::StatusOr<std::string> text =
        ReadFileToString("graph_analyzer/testdata/" + example.file);
    EXPECT_OK(text.status());
    if (text.ok()) seeds.push_back(*text);
  }
  // Edge cases: empty, huge ranks and dims, cycles, odd references.
  seeds.push_back("");
  seeds.push_back("world_size: 65536 node { name: \"x\" op: \"Placeholder\" "
                  "output { dtype: DT_INT8 shape: [1] } rank: 65535 }");
  seeds.push_back("node { name: \"x\" op: \"Placeholder\" output { dtype: "
                  "DT_FLOAT64 shape: [1099511627776, 1099511627776] } rank: 0 }");
  seeds.push_back("node { name: \"a\" op: \"Relu\" input: \"a:99999999999\" "
                  "rank: 0 }");
  seeds.push_back("node { name: \"x\" op: \"Placeholder\" output { dtype: "
                  "DT_FLOAT32 shape: [-1, 4] } rank: 0 } node { name: \"r\" "
                  "op: \"Reshape\" input: \"x\" attr { key: \"shape\" value { "
                  "ints: [-1, 1099511627776, 1099511627776] } } rank: 1 }");
  return seeds;
}

const char* const kTokens[] = {
    "node {",   "}",          "input: \"x\"",        "rank: 1",
    "rank: -5", "shape: -1",  "shape: 0",            "shape: 1099511627777",
    ":",        "op: \"Split\"", "attr { key: \"axis\" value { i: -3 } }",
    "world_size: 3", "output { dtype: DT_FLOAT32 shape: [2, -1] }",
    "9223372036854775807", "-9223372036854775808", "\"", "\\",
};

// One random edit: flip a byte, delete or duplicate a range, or insert a
// token of the text format.
std::string Mutate(const std::string& in, std::mt19937_64& rng) {
  std::string s = in;
  auto pos = [&](size_t n) { return n == 0 ? 0 : rng() % (n + 1); };
  switch (rng() % 4) {
    case 0:
      if (!s.empty()) s[rng() % s.size()] ^= 1 << (rng() % 8);
      break;
    case 1: {
      size_t at = pos(s.size());
      s.erase(at, rng() % 64);
      break;
    }
    case 2: {
      size_t at = pos(s.size());
      std::string chunk = s.substr(at, rng() % 256);
      s.insert(pos(s.size()), chunk);
      break;
    }
    default:
      s.insert(pos(s.size()), kTokens[rng() % std::size(kTokens)]);
  }
  return s;
}

TEST(GraphTextFuzzTest, SeedsAndMutationsNeverCrash) {
  std::vector<std::string> seeds = Seeds();
  ASSERT_GE(seeds.size(), 5u);
  std::map<Outcome, int> outcomes;
  std::mt19937_64 rng(20261122);
  for (const std::string& seed : seeds) {
    outcomes[RunOneInput(seed)]++;
    std::string current = seed;
    for (int i = 0; i < 400; ++i) {
      // Mostly single edits of the seed; sometimes a chain of them.
      current = Mutate(rng() % 4 == 0 ? current : seed, rng);
      outcomes[RunOneInput(current)]++;
    }
  }
  // Every stage was reached, so the loop did test something at each.
  EXPECT_GT(outcomes[Outcome::kParseError], 0);
  EXPECT_GT(outcomes[Outcome::kInvalidGraph], 0);
  EXPECT_GT(outcomes[Outcome::kPlanned], 0);
  std::cout << "outcomes: parse error " << outcomes[Outcome::kParseError]
            << ", invalid graph " << outcomes[Outcome::kInvalidGraph]
            << ", plan error " << outcomes[Outcome::kPlanError]
            << ", planned " << outcomes[Outcome::kPlanned] << "\n";
}

TEST(GraphTextFuzzTest, OverlongInputIsSkipped) {
  EXPECT_EQ(RunOneInput(std::string(kMaxInputBytes + 1, ' ')),
            Outcome::kTooLong);
}

}  // namespace
}  // namespace rdmaflow::graph::fuzz
