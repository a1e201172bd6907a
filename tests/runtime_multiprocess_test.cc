// Real multi-process runtime tests over UCX shared memory: ranks are OS
// processes that rendezvous through LibTorch's TCPStore. Every example graph
// arrives byte-exact through the zero-copy executor (dynamic tensors
// promoted to static slots after tracing, mid-run), the baselines deliver the
// same bytes, and a receiver killed mid-run gives its sender an error
// instead of a hang.
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launch/launcher.h"
#include "tests/runtime_e2e_rank.h"

namespace rdmaflow {
namespace {

const std::map<std::string, std::string> kUcxShm = {
    {kTransportEnv, "ucx"}, {kParamsEnv, "tls=shm"}};

std::map<std::string, std::string> Env(const std::string& mode) {
  std::map<std::string, std::string> env = kUcxShm;
  env[kModeEnv] = mode;
  return env;
}

class RuntimeMultiProcessTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RuntimeMultiProcessTest, ExampleArrivesByteExactOverUcx) {
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan plan, ExamplePlan(GetParam()));
  EXPECT_OK(launch::LaunchRanks(plan.world_size(),
                                Env(absl::StrCat("replay:", GetParam(), ":rdma")))
                .status);
}

INSTANTIATE_TEST_SUITE_P(
    Examples, RuntimeMultiProcessTest,
    ::testing::Values("mlp_2ranks.pbtxt", "cnn_ps_2workers.pbtxt",
                      "cnn_layer_separated.pbtxt", "seq_dynamic_length.pbtxt"),
    [](const auto& info) {
      return std::string(absl::StripSuffix(info.param, ".pbtxt"));
    });

TEST(RuntimeMultiProcessBaselinesTest, BaselinesDeliverTheSameBytes) {
  for (const char* communicator : {"rdma_copy", "grpc"}) {
    SCOPED_TRACE(communicator);
    EXPECT_OK(launch::LaunchRanks(
                  3, Env(absl::StrCat("replay:cnn_ps_2workers.pbtxt:", communicator)))
                  .status);
  }
}

TEST(RuntimeMultiProcessKillTest, KilledReceiverGivesTheSenderAnError) {
  EXPECT_OK(launch::LaunchRanks(2, Env("kill")).status);
}

// The executor and rdma_copy against a receiver that exits before the
// first post: the sender's error is kUnavailable, not a fault.
TEST(RuntimeMultiProcessKillTest, AReceiverGoneBeforeTheFirstPostIsAnError) {
  for (const char* communicator : {"rdma", "rdma_copy"}) {
    SCOPED_TRACE(communicator);
    EXPECT_OK(launch::LaunchRanks(2, Env(absl::StrCat("exit_before_post:", communicator)))
                  .status);
  }
}

}  // namespace
}  // namespace rdmaflow

int main(int argc, char** argv) { return rdmaflow::RuntimeE2eMain(argc, argv); }
