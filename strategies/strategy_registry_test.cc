// The registry: built-ins are there, unknown names list the known ones,
// names are unique, and a strategy's own parameters are validated.
#include "strategies/strategy_registry.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "strategies/builtin_strategies.h"

namespace rdmaflow::strategies {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::Contains;
using ::testing::HasSubstr;

TEST(StrategyRegistryTest, BuiltinsAreRegisteredAndUnknownNamesListThem) {
  StrategyRegistry registry;
  ASSERT_OK(RegisterBuiltinStrategies(registry));
  EXPECT_THAT(registry.names(), Contains("ps"));
  EXPECT_THAT(registry.Create("horovod", {}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("ps")));
  EXPECT_THAT(RegisterBuiltinStrategies(registry),
              StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(registry.Describe(), HasSubstr("ps: parameter servers"));
}

TEST(StrategyRegistryTest, StrategiesValidateTheirParameters) {
  StrategyRegistry registry;
  ASSERT_OK(RegisterBuiltinStrategies(registry));
  StrategyOptions options;
  options.params = {{"sync", "ssp:x"}};
  EXPECT_THAT(registry.Create("ps", options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("bad sync mode 'ssp:x'")));
  options.params = {{"replicas", "2"}};
  EXPECT_THAT(registry.Create("ps", options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("known: servers, sync, pull, copies")));
  options.params = {};
  options.communicator = "grpc";
  EXPECT_THAT(registry.Create("ps", options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("use pull=send")));
  options.params = {{"pull", "send"}};
  EXPECT_OK(registry.Create("ps", options).status());
}

TEST(StrategyRegistryTest, ACodecIsCheckedAndOnlyTakenWhereGradientsMove) {
  StrategyRegistry registry;
  ASSERT_OK(RegisterBuiltinStrategies(registry));
  StrategyOptions options;
  options.codec = "zip";
  EXPECT_THAT(registry.Create("allreduce", options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--codec: unknown gradient codec 'zip'")));
  options.codec = "topk:ratio=0.01";
  EXPECT_OK(registry.Create("allreduce", options).status());
  EXPECT_OK(registry.Create("layer_separated", options).status());
  EXPECT_THAT(registry.Create("gossip", options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'gossip' does not send its gradients through a codec")));
}

}  // namespace
}  // namespace rdmaflow::strategies
