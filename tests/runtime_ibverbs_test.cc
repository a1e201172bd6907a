// The runtime over native verbs (rdma/ibverbs), ranks as OS processes: the
// replay of example graphs byte-exact through the zero-copy executor (static
// writes with immediate, dynamic pulls by RDMA READ, credits by RDMA WRITE)
// and through the rdma_copy baseline. Needs an RDMA device: tools/rdma_tests.sh
// runs it inside the Soft-RoCE VM (RDMAFLOW_RXE_DEV); elsewhere it skips.
#include <cstdlib>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launch/launcher.h"
#include "tests/runtime_e2e_rank.h"

namespace rdmaflow {
namespace {

std::map<std::string, std::string> Env(const std::string& mode) {
  const char* device = std::getenv("RDMAFLOW_RXE_DEV");
  // Emulated CPUs (the rxe VM) answer slowly: 2^16 * 4 us per retry.
  std::string params = "ack_timeout=16";
  if (device != nullptr) params += absl::StrCat(",device=", device);
  return {{kModeEnv, mode}, {kTransportEnv, "ibverbs"}, {kParamsEnv, params}};
}

class RuntimeIbverbsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    // The launcher probes the device the ranks will open.
    for (const auto& [key, value] : Env("probe")) {
      setenv(key.c_str(), value.c_str(), 1);
    }
    absl::StatusOr<std::unique_ptr<rdma::Transport>> transport =
        MakeTransport(0);
    if (absl::IsUnavailable(transport.status())) {
      GTEST_SKIP() << "no RDMA device: " << transport.status().message()
                   << " (tools/rdma_tests.sh runs this in a Soft-RoCE VM)";
    }
    ASSERT_OK(transport.status());
  }
};

TEST_P(RuntimeIbverbsTest, ReplayArrivesByteExact) {
  const std::string mode = absl::StrCat("replay:", GetParam());
  const std::string file = GetParam().substr(0, GetParam().find(':'));
  ASSERT_OK_AND_ASSIGN(plan::TransferPlan plan, ExamplePlan(file));
  // Soft-RoCE under emulation is slow: a deadline inside the test's own
  // (size large, 900 s for the four cases).
  EXPECT_OK(launch::LaunchRanks(plan.world_size(), Env(mode), absl::Seconds(600)).status);
}

INSTANTIATE_TEST_SUITE_P(
    Examples, RuntimeIbverbsTest,
    ::testing::Values("mlp_2ranks.pbtxt:rdma", "seq_dynamic_length.pbtxt:rdma",
                      "cnn_layer_separated.pbtxt:rdma",
                      "mlp_2ranks.pbtxt:rdma_copy"),
    [](const auto& info) {
      std::string name = info.param;
      for (char& c : name) {
        if (c == '.' || c == ':') c = '_';
      }
      return name;
    });

}  // namespace
}  // namespace rdmaflow

int main(int argc, char** argv) { return rdmaflow::RuntimeE2eMain(argc, argv); }
