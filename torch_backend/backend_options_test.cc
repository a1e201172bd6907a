// BackendOptions from the environment: defaults, the wait policy, and
// malformed variables named in the error.
#include "torch_backend/backend_options.h"

#include <cstdlib>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rdmaflow::torch_backend {
namespace {

using ::rdmaflow::testing::IsOk;
using ::rdmaflow::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

class BackendOptionsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* name :
         {"RDMAFLOW_WAIT", "RDMAFLOW_STAGING_MB", "RDMAFLOW_DIRECT", "RDMAFLOW_INLINE_KB",
          "RDMAFLOW_DEVICE", "RDMAFLOW_CMA", "RDMAFLOW_CMA_MIN_KB", "RDMAFLOW_SHARED_TENSORS",
          "RDMAFLOW_SHARED_TENSORS_MIN_KB", "RDMAFLOW_DEVICE_MB", "RDMAFLOW_DEVICE_POOL_MB",
          "RDMAFLOW_DEVICE_P2P", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF",
          "LOCAL_RANK"}) {
      unsetenv(name);
    }
  }
};

TEST_F(BackendOptionsTest, WaitsAreAdaptiveUnlessTold) {
  absl::StatusOr<BackendOptions> options = BackendOptions::FromEnvironment(absl::Seconds(5));
  ASSERT_THAT(options, IsOk());
  EXPECT_EQ(options->wait.ToString(), onesided::WaitPolicy::Adaptive().ToString());
  EXPECT_EQ(options->timeout, absl::Seconds(5));

  setenv("RDMAFLOW_WAIT", "spin", 1);
  options = BackendOptions::FromEnvironment(absl::Seconds(5));
  ASSERT_THAT(options, IsOk());
  EXPECT_EQ(options->wait.ToString(), "spin");

  setenv("RDMAFLOW_WAIT", "adaptive:spin=10,yield_us=20,sleep_us=30", 1);
  options = BackendOptions::FromEnvironment(absl::Seconds(5));
  ASSERT_THAT(options, IsOk());
  EXPECT_EQ(options->wait.spin_rounds, 10);
  EXPECT_EQ(options->wait.max_sleep, absl::Microseconds(30));
}

TEST_F(BackendOptionsTest, DirectAccessIsAutomaticUnlessTurnedOff) {
  absl::StatusOr<BackendOptions> options = BackendOptions::FromEnvironment(absl::Seconds(5));
  ASSERT_THAT(options, IsOk());
  EXPECT_EQ(options->direct, collectives::DirectAccess::kAuto);
  setenv("RDMAFLOW_DIRECT", "off", 1);
  options = BackendOptions::FromEnvironment(absl::Seconds(5));
  ASSERT_THAT(options, IsOk());
  EXPECT_EQ(options->direct, collectives::DirectAccess::kOff);
  setenv("RDMAFLOW_DIRECT", "sometimes", 1);
  EXPECT_THAT(BackendOptions::FromEnvironment(absl::Seconds(5)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("RDMAFLOW_DIRECT"), HasSubstr("'auto' or 'off'"))));
}

TEST_F(BackendOptionsTest, DeviceToDeviceSendsAreAutomaticUnlessTurnedOff) {
  absl::StatusOr<BackendOptions> options = BackendOptions::FromEnvironment(absl::Seconds(5));
  ASSERT_THAT(options, IsOk());
  EXPECT_TRUE(options->device_p2p);
  setenv("RDMAFLOW_DEVICE_P2P", "off", 1);
  options = BackendOptions::FromEnvironment(absl::Seconds(5));
  ASSERT_THAT(options, IsOk());
  EXPECT_FALSE(options->device_p2p);
  setenv("RDMAFLOW_DEVICE_P2P", "on", 1);
  EXPECT_THAT(BackendOptions::FromEnvironment(absl::Seconds(5)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("RDMAFLOW_DEVICE_P2P"), HasSubstr("neither auto"))));
}

TEST_F(BackendOptionsTest, SingleCopyReadsAreAutomaticFrom4MiBUnlessTurnedOff) {
  absl::StatusOr<BackendOptions> options = BackendOptions::FromEnvironment(absl::Seconds(5));
  ASSERT_THAT(options, IsOk());
  EXPECT_TRUE(options->cma);
  EXPECT_EQ(options->cma_min_bytes, size_t{4} << 20);
  setenv("RDMAFLOW_CMA", "off", 1);
  setenv("RDMAFLOW_CMA_MIN_KB", "0", 1);
  options = BackendOptions::FromEnvironment(absl::Seconds(5));
  ASSERT_THAT(options, IsOk());
  EXPECT_FALSE(options->cma);
  EXPECT_EQ(options->cma_min_bytes, 0u);
  setenv("RDMAFLOW_CMA", "on", 1);
  EXPECT_THAT(BackendOptions::FromEnvironment(absl::Seconds(5)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("RDMAFLOW_CMA"), HasSubstr("neither auto"))));
  setenv("RDMAFLOW_CMA", "auto", 1);
  setenv("RDMAFLOW_CMA_MIN_KB", "-1", 1);
  EXPECT_THAT(BackendOptions::FromEnvironment(absl::Seconds(5)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("RDMAFLOW_CMA_MIN_KB")));
}

TEST_F(BackendOptionsTest, SharedTensorsAreOffUnlessTurnedOnFrom1MiB) {
  absl::StatusOr<BackendOptions> options = BackendOptions::FromEnvironment(absl::Seconds(5));
  ASSERT_THAT(options, IsOk());
  EXPECT_FALSE(options->shared_tensors);
  EXPECT_EQ(options->shared_tensors_min_bytes, size_t{1} << 20);
  setenv("RDMAFLOW_SHARED_TENSORS", "on", 1);
  setenv("RDMAFLOW_SHARED_TENSORS_MIN_KB", "64", 1);
  options = BackendOptions::FromEnvironment(absl::Seconds(5));
  ASSERT_THAT(options, IsOk());
  EXPECT_TRUE(options->shared_tensors);
  EXPECT_EQ(options->shared_tensors_min_bytes, size_t{64} << 10);
  setenv("RDMAFLOW_SHARED_TENSORS", "yes", 1);
  EXPECT_THAT(BackendOptions::FromEnvironment(absl::Seconds(5)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("RDMAFLOW_SHARED_TENSORS"), HasSubstr("neither off"))));
  setenv("RDMAFLOW_SHARED_TENSORS", "off", 1);
  setenv("RDMAFLOW_SHARED_TENSORS_MIN_KB", "0", 1);
  EXPECT_THAT(BackendOptions::FromEnvironment(absl::Seconds(5)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("RDMAFLOW_SHARED_TENSORS_MIN_KB")));
}

TEST_F(BackendOptionsTest, TheDeviceRegionAndPoolAre64MiBEachUnlessTold) {
  absl::StatusOr<BackendOptions> options = BackendOptions::FromEnvironment(absl::Seconds(5));
  ASSERT_THAT(options, IsOk());
  EXPECT_EQ(options->device_bytes, size_t{64} << 20);
  EXPECT_EQ(options->device_pool_bytes, size_t{64} << 20);
  setenv("RDMAFLOW_DEVICE_MB", "8", 1);
  setenv("RDMAFLOW_DEVICE_POOL_MB", "0", 1);
  options = BackendOptions::FromEnvironment(absl::Seconds(5));
  ASSERT_THAT(options, IsOk());
  EXPECT_EQ(options->device_bytes, size_t{8} << 20);
  EXPECT_EQ(options->device_pool_bytes, 0u);
  setenv("RDMAFLOW_DEVICE_POOL_MB", "lots", 1);
  EXPECT_THAT(BackendOptions::FromEnvironment(absl::Seconds(5)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("RDMAFLOW_DEVICE_POOL_MB")));
}

TEST_F(BackendOptionsTest, TorchsCudaMallocAsyncBackendIsSeenInEitherVariable) {
  unsetenv("PYTORCH_CUDA_ALLOC_CONF");
  unsetenv("PYTORCH_ALLOC_CONF");
  absl::StatusOr<BackendOptions> options = BackendOptions::FromEnvironment(absl::Seconds(5));
  ASSERT_THAT(options, IsOk());
  EXPECT_FALSE(options->torch_cuda_malloc_async);
  for (const char* name : {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"}) {
    for (const char* conf :
         {"backend:cudaMallocAsync", "expandable_segments:True, backend : cudaMallocAsync"}) {
      setenv(name, conf, 1);
      options = BackendOptions::FromEnvironment(absl::Seconds(5));
      ASSERT_THAT(options, IsOk());
      EXPECT_TRUE(options->torch_cuda_malloc_async) << name << "=" << conf;
    }
    for (const char* conf : {"backend:native", "expandable_segments:True", "cudaMallocAsync",
                             "backend:cudaMallocAsyncX"}) {
      setenv(name, conf, 1);
      options = BackendOptions::FromEnvironment(absl::Seconds(5));
      ASSERT_THAT(options, IsOk());
      EXPECT_FALSE(options->torch_cuda_malloc_async) << name << "=" << conf;
    }
    unsetenv(name);
  }
  // As torch reads them: PYTORCH_ALLOC_CONF only where the other is unset.
  setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", 1);
  setenv("PYTORCH_ALLOC_CONF", "backend:cudaMallocAsync", 1);
  options = BackendOptions::FromEnvironment(absl::Seconds(5));
  ASSERT_THAT(options, IsOk());
  EXPECT_FALSE(options->torch_cuda_malloc_async);
}

TEST_F(BackendOptionsTest, ARankTakingAnotherDeviceThanItsLocalRankIsWarned) {
  unsetenv("LOCAL_RANK");
  absl::StatusOr<BackendOptions> options = BackendOptions::FromEnvironment(absl::Seconds(5));
  ASSERT_THAT(options, IsOk());
  EXPECT_EQ(options->local_rank, -1);
  EXPECT_EQ(DeviceChoiceWarning(*options, 0, 8), "");
  setenv("LOCAL_RANK", "3", 1);
  options = BackendOptions::FromEnvironment(absl::Seconds(5));
  ASSERT_THAT(options, IsOk());
  EXPECT_EQ(options->local_rank, 3);
  EXPECT_THAT(DeviceChoiceWarning(*options, 0, 8),
              AllOf(HasSubstr("cuda:0"), HasSubstr("torch.cuda.set_device(3)")));
  EXPECT_EQ(DeviceChoiceWarning(*options, 3, 8), "");   // its own device
  EXPECT_EQ(DeviceChoiceWarning(*options, 0, 1), "");   // ranks sharing one GPU
  EXPECT_EQ(DeviceChoiceWarning(*options, 0, 2), "");   // more ranks than GPUs
  EXPECT_EQ(DeviceChoiceWarning(*options, -1, 8), "");  // no CUDA
  setenv("LOCAL_RANK", "three", 1);
  options = BackendOptions::FromEnvironment(absl::Seconds(5));
  ASSERT_THAT(options, IsOk());
  EXPECT_EQ(options->local_rank, -1);
}

TEST_F(BackendOptionsTest, DeviceTensorsAreCudaUnlessTheFakeDeviceIsAsked) {
  absl::StatusOr<BackendOptions> options = BackendOptions::FromEnvironment(absl::Seconds(5));
  ASSERT_THAT(options, IsOk());
  EXPECT_EQ(options->device, "cuda");
  setenv("RDMAFLOW_DEVICE", "fake", 1);
  options = BackendOptions::FromEnvironment(absl::Seconds(5));
  ASSERT_THAT(options, IsOk());
  EXPECT_EQ(options->device, "fake");
  setenv("RDMAFLOW_DEVICE", "none", 1);
  options = BackendOptions::FromEnvironment(absl::Seconds(5));
  ASSERT_THAT(options, IsOk());
  EXPECT_EQ(options->device, "none");
  setenv("RDMAFLOW_DEVICE", "rocm", 1);
  EXPECT_THAT(BackendOptions::FromEnvironment(absl::Seconds(5)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("RDMAFLOW_DEVICE"), HasSubstr("'rocm'"))));
}

TEST_F(BackendOptionsTest, MalformedVariablesAreNamed) {
  setenv("RDMAFLOW_WAIT", "nap", 1);
  EXPECT_THAT(BackendOptions::FromEnvironment(absl::Seconds(5)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("RDMAFLOW_WAIT")));
  unsetenv("RDMAFLOW_WAIT");
  setenv("RDMAFLOW_STAGING_MB", "0", 1);
  EXPECT_THAT(BackendOptions::FromEnvironment(absl::Seconds(5)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("RDMAFLOW_STAGING_MB")));
  unsetenv("RDMAFLOW_STAGING_MB");
  setenv("RDMAFLOW_INLINE_KB", "-1", 1);
  EXPECT_THAT(BackendOptions::FromEnvironment(absl::Seconds(5)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("RDMAFLOW_INLINE_KB"), HasSubstr("KiB between 0"))));
}

// How the variable parses; python_backend_test runs calls with it on and off.
TEST_F(BackendOptionsTest, InlineCallsAreOffUnlessASizeIsGiven) {
  absl::StatusOr<BackendOptions> options = BackendOptions::FromEnvironment(absl::Seconds(5));
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->inline_bytes, 0u);
  setenv("RDMAFLOW_INLINE_KB", "256", 1);
  options = BackendOptions::FromEnvironment(absl::Seconds(5));
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->inline_bytes, 256u << 10);
}

}  // namespace
}  // namespace rdmaflow::torch_backend
