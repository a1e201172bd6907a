// File: data_file_test.cc
#include "cli/data_file.h"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace rdmaflow::cli {
namespace {

namespace fs = std::filesystem;

class DataFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / "data_file_test";
    fs::create_directories(root_ / "docs/scale");
    fs::create_directories(root_ / "elsewhere");
    std::ofstream(root_ / "docs/scale/table.json") << "{}";
    old_cwd_ = fs::current_path();
  }
  void TearDown() override {
    fs::current_path(old_cwd_);
    unsetenv("BUILD_WORKSPACE_DIRECTORY");
  }
  fs::path root_;
  fs::path old_cwd_;
};

TEST_F(DataFileTest, TheWorkingDirectoryFirst) {
  fs::current_path(root_);
  EXPECT_EQ(FindDataFile("docs/scale/table.json"), "docs/scale/table.json");
}

TEST_F(DataFileTest, ThenTheWorkspaceBazelRunNames) {
  fs::current_path(root_ / "elsewhere");
  EXPECT_EQ(FindDataFile("docs/scale/table.json"), std::nullopt);
  setenv("BUILD_WORKSPACE_DIRECTORY", root_.c_str(), 1);
  EXPECT_EQ(FindDataFile("docs/scale/table.json"),
            (root_ / "docs/scale/table.json").string());
}

TEST_F(DataFileTest, AFolderIsNotTheFile) {
  fs::current_path(root_);
  EXPECT_EQ(FindDataFile("docs/scale"), std::nullopt);
  EXPECT_EQ(FindDataFile("docs/scale/missing.json"), std::nullopt);
}

}  // namespace
}  // namespace rdmaflow::cli
