// Launcher detection from each launcher's variables, and clear errors.
#include "train/launch_env.h"

#include <map>
#include <string>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::train {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

GetEnv Env(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

TEST(LaunchEnvTest, DetectsEachLauncher) {
  struct Case {
    std::map<std::string, std::string> vars;
    std::string launcher;
    int rank, world;
  };
  const Case cases[] = {
      {{{"RANK", "2"}, {"WORLD_SIZE", "4"}}, "torchrun", 2, 4},
      {{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "3"}}, "mpirun", 1, 3},
      {{{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}}, "pmi", 0, 2},
      {{{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}}, "slurm", 5, 8},
      // torchrun's variables win over the scheduler's underneath.
      {{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}},
       "torchrun", 1, 2},
  };
  for (const Case& c : cases) {
    ASSERT_OK_AND_ASSIGN(std::optional<LaunchInfo> info, DetectLaunch(Env(c.vars)));
    ASSERT_TRUE(info.has_value()) << c.launcher;
    EXPECT_EQ(info->launcher, c.launcher);
    EXPECT_EQ(info->rank, c.rank);
    EXPECT_EQ(info->world_size, c.world);
  }
  ASSERT_OK_AND_ASSIGN(std::optional<LaunchInfo> none, DetectLaunch(Env({})));
  EXPECT_FALSE(none.has_value());
}

TEST(LaunchEnvTest, MalformedVariablesAreNamed) {
  EXPECT_THAT(DetectLaunch(Env({{"RANK", "x"}, {"WORLD_SIZE", "2"}})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("RANK")));
  EXPECT_THAT(DetectLaunch(Env({{"SLURM_PROCID", "3"}})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("SLURM_NTASKS")));
  EXPECT_THAT(DetectLaunch(Env({{"PMI_RANK", "4"}, {"PMI_SIZE", "4"}})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("outside PMI_SIZE=4")));
}

}  // namespace
}  // namespace rdmaflow::train
