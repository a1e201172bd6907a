// File: ranks_or_tests_main.cc
#include "launch/ranks_or_tests_main.h"

#include <cstdio>
#include <cstdlib>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::launch {

int RanksOrTestsMain(int argc, char** argv, const char* env,
                     const std::function<absl::Status(const char* value)>& rank) {
  const char* value = std::getenv(env);
  if (value != nullptr && std::getenv("RANK") != nullptr) {
    absl::Status status = rank(value);
    if (!status.ok()) {
      std::fprintf(stderr, "rank %s: %s\n", std::getenv("RANK"),
                   status.ToString().c_str());
      return 1;
    }
    return 0;
  }
  ::testing::InitGoogleMock(&argc, argv);
  return RUN_ALL_TESTS();
}

}  // namespace rdmaflow::launch
