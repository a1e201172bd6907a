// File: job_token_test.cc
#include "rdma/job_token.h"

#include <cstdlib>
#include <map>
#include <string>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::rdma {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

// An environment as a map.
absl::StatusOr<JobToken> TokenFor(
    const std::map<std::string, std::string>& env) {
  return JobTokenFrom([&](absl::string_view name) -> std::optional<std::string> {
    auto it = env.find(std::string(name));
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

TEST(JobTokenTest, ExplicitTokenWins) {
  ASSERT_OK_AND_ASSIGN(
      JobToken token,
      TokenFor({{"RDMAFLOW_JOB_TOKEN", "s3cret"},
                {"TORCHELASTIC_RUN_ID", "run"},
                {"MASTER_ADDR", "10.0.0.1"},
                {"MASTER_PORT", "29500"}}));
  EXPECT_EQ(token.value, "s3cret");
  EXPECT_EQ(token.source, "RDMAFLOW_JOB_TOKEN");
}

TEST(JobTokenTest, ExplicitTokenIsValidated) {
  EXPECT_THAT(TokenFor({{"RDMAFLOW_JOB_TOKEN", ""}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("set but empty")));
  EXPECT_THAT(
      TokenFor({{"RDMAFLOW_JOB_TOKEN", std::string(kMaxJobTokenBytes + 1, 'x')}}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bytes")));
  EXPECT_OK(TokenFor({{"RDMAFLOW_JOB_TOKEN", std::string(kMaxJobTokenBytes, 'x')}}));
}

TEST(JobTokenTest, DerivedTokensSeparateJobs) {
  // torchrun's default run id is "none": the store's port still tells two
  // jobs apart.
  ASSERT_OK_AND_ASSIGN(JobToken a, TokenFor({{"TORCHELASTIC_RUN_ID", "none"},
                                             {"MASTER_ADDR", "10.0.0.1"},
                                             {"MASTER_PORT", "29500"}}));
  ASSERT_OK_AND_ASSIGN(JobToken b, TokenFor({{"TORCHELASTIC_RUN_ID", "none"},
                                             {"MASTER_ADDR", "10.0.0.1"},
                                             {"MASTER_PORT", "29501"}}));
  ASSERT_OK_AND_ASSIGN(JobToken c, TokenFor({{"TORCHELASTIC_RUN_ID", "other"},
                                             {"MASTER_ADDR", "10.0.0.1"},
                                             {"MASTER_PORT", "29500"}}));
  ASSERT_OK_AND_ASSIGN(JobToken a2, TokenFor({{"TORCHELASTIC_RUN_ID", "none"},
                                              {"MASTER_ADDR", "10.0.0.1"},
                                              {"MASTER_PORT", "29500"}}));
  EXPECT_EQ(a.value, a2.value);
  EXPECT_NE(a.value, b.value);
  EXPECT_NE(a.value, c.value);
  EXPECT_NE(a.value, kDefaultJobToken);
  EXPECT_THAT(a.source, HasSubstr("TORCHELASTIC_RUN_ID MASTER_ADDR MASTER_PORT"));
  // Field boundaries matter: these two must not collide.
  ASSERT_OK_AND_ASSIGN(JobToken d, TokenFor({{"MASTER_ADDR", "a|MASTER_PORT=1:b"}}));
  ASSERT_OK_AND_ASSIGN(JobToken e, TokenFor({{"MASTER_ADDR", "a"},
                                             {"MASTER_PORT", "b"}}));
  EXPECT_NE(d.value, e.value);
  // Without torchrun: MASTER_ADDR/MASTER_PORT alone (mpirun, by hand).
  ASSERT_OK_AND_ASSIGN(JobToken f, TokenFor({{"MASTER_ADDR", "10.0.0.1"},
                                             {"MASTER_PORT", "29500"}}));
  EXPECT_NE(f.value, a.value);
  EXPECT_THAT(f.source, HasSubstr("not a secret"));
}

TEST(JobTokenTest, DefaultWhenNothingIsSet) {
  ASSERT_OK_AND_ASSIGN(JobToken token, TokenFor({}));
  EXPECT_EQ(token.value, kDefaultJobToken);
  EXPECT_THAT(token.source, HasSubstr("default"));
  // Empty variables count as unset.
  ASSERT_OK_AND_ASSIGN(token, TokenFor({{"MASTER_ADDR", ""}}));
  EXPECT_EQ(token.value, kDefaultJobToken);
}

TEST(JobTokenTest, DerivedTokenIsBounded) {
  EXPECT_THAT(
      TokenFor({{"TORCHELASTIC_RUN_ID", std::string(kMaxJobTokenBytes, 'r')}}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("RDMAFLOW_JOB_TOKEN")));
}

TEST(JobTokenTest, ReadsTheProcessEnvironment) {
  const char* saved = std::getenv("RDMAFLOW_JOB_TOKEN");
  const std::string old = saved ? saved : "";
  setenv("RDMAFLOW_JOB_TOKEN", "from-the-environment", 1);
  absl::StatusOr<JobToken> token = JobTokenFromEnvironment();
  if (saved) {
    setenv("RDMAFLOW_JOB_TOKEN", old.c_str(), 1);
  } else {
    unsetenv("RDMAFLOW_JOB_TOKEN");
  }
  ASSERT_OK(token);
  EXPECT_EQ(token->value, "from-the-environment");
}

TEST(JobTokenTest, MatchesComparesWholeTokens) {
  EXPECT_TRUE(JobTokenMatches("secret", "secret"));
  EXPECT_FALSE(JobTokenMatches("secret", "secreT"));
  EXPECT_FALSE(JobTokenMatches("secret", "Secret"));
  EXPECT_FALSE(JobTokenMatches("secret", "secret2"));
  EXPECT_FALSE(JobTokenMatches("secret", "secre"));
  EXPECT_FALSE(JobTokenMatches("secret", ""));
  // A repetition of the expected token is still a different length.
  EXPECT_FALSE(JobTokenMatches("ab", "abab"));
  EXPECT_FALSE(JobTokenMatches("", "x"));
  // An empty expected value (a proof that could not be computed) matches
  // nothing, not even an empty one: the check fails closed.
  EXPECT_FALSE(JobTokenMatches("", ""));
  EXPECT_FALSE(JobTokenMatches(std::string("a\0b", 3), "a"));
}

// RFC 4231, test case 2: HMAC-SHA256 with key "Jefe".
TEST(JobTokenTest, ProofIsHmacSha256) {
  EXPECT_EQ(JobTokenProof("Jefe", "what do ya want for nothing?").value(),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_NE(JobTokenProof("a", "m").value(), JobTokenProof("b", "m").value());
  EXPECT_NE(JobTokenProof("a", "m").value(), JobTokenProof("a", "n").value());
  // An empty key is a key, not OpenSSL's "the previous key".
  const std::string empty_key = JobTokenProof("", "m").value();
  EXPECT_EQ(empty_key.size(), 64u);
  EXPECT_NE(empty_key, JobTokenProof("a", "m").value());
  EXPECT_EQ(JobTokenProof("", "m").value(), empty_key);
  EXPECT_FALSE(JobTokenProof(std::string(kMaxJobTokenBytes + 1, 'k'), "m").ok());
}

}  // namespace
}  // namespace rdmaflow::rdma
