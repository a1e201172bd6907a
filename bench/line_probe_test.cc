// The line probe: a round trip between the first two CPUs this process may
// run on; refused options and CPUs; a thread that may run on one CPU only
// has nothing to measure.
#include "bench/line_probe.h"

#include <pthread.h>
#include <sched.h>

#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace rdmaflow::bench {
namespace {

using ::rdmaflow::testing::StatusIs;

int AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  return CPU_COUNT(&set);
}

// A probe needs both CPUs at once: on a machine busy with other tests it may
// not get them within its timeout, and a sandbox may refuse pinning. Those
// skip, saying so; anything else is the probe's answer.
#define SKIP_IF_CPUS_UNAVAILABLE(result)                                           \
  if (absl::IsDeadlineExceeded((result).status()) ||                               \
      absl::IsInternal((result).status())) {                                       \
    GTEST_SKIP() << "two CPUs were not available together: " << (result).status(); \
  }

TEST(LineProbeTest, MeasuresARoundTripBetweenTwoCpus) {
  if (AllowedCpus() < 2) GTEST_SKIP() << "this process may run on one CPU only";
  LineProbeOptions options;
  options.batches = 3;
  options.round_trips = 200;
  options.timeout = absl::Seconds(10);
  absl::StatusOr<LineRoundTrip> first = ProbeLineRoundTrip(options);
  SKIP_IF_CPUS_UNAVAILABLE(first);
  ASSERT_OK(first.status());
  const LineRoundTrip probe = *first;
  EXPECT_GE(probe.cpu_a, 0);
  EXPECT_GE(probe.cpu_b, 0);
  EXPECT_NE(probe.cpu_a, probe.cpu_b);
  EXPECT_GT(probe.round_trip_ns, 0);
  // The CPUs named are the ones measured.
  options.cpu_a = probe.cpu_b;
  options.cpu_b = probe.cpu_a;
  absl::StatusOr<LineRoundTrip> swapped = ProbeLineRoundTrip(options);
  SKIP_IF_CPUS_UNAVAILABLE(swapped);
  ASSERT_OK(swapped.status());
  EXPECT_EQ(swapped->cpu_a, probe.cpu_b);
  EXPECT_EQ(swapped->cpu_b, probe.cpu_a);
  // One CPU twice is refused.
  options.cpu_b = options.cpu_a;
  EXPECT_THAT(ProbeLineRoundTrip(options), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(LineProbeTest, RefusesBadOptionsAndCpusItMayNotRunOn) {
  LineProbeOptions bad;
  bad.batches = 0;
  EXPECT_THAT(ProbeLineRoundTrip(bad), StatusIs(absl::StatusCode::kInvalidArgument));
  bad = {};
  bad.round_trips = 0;
  EXPECT_THAT(ProbeLineRoundTrip(bad), StatusIs(absl::StatusCode::kInvalidArgument));
  bad = {};
  bad.cpu_a = CPU_SETSIZE - 1;
  EXPECT_THAT(ProbeLineRoundTrip(bad),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("is not one this process may run on")));
  bad.cpu_a = CPU_SETSIZE + 5;
  EXPECT_THAT(ProbeLineRoundTrip(bad), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(LineProbeTest, TimesACopyTheOtherCpuReadsPlainAndStreamed) {
  if (AllowedCpus() < 2) GTEST_SKIP() << "this process may run on one CPU only";
  LineProbeOptions options;
  options.timeout = absl::Seconds(10);
  for (size_t streaming_min : {size_t{0}, size_t{4096}}) {
    absl::StatusOr<CopyRound> round = ProbeCopyRound(options, 65536, streaming_min, 20);
    if (absl::IsDeadlineExceeded(round.status())) {
      GTEST_SKIP() << "two CPUs were not available together: " << round.status();
    }
    // kInternal here is a pin refused, or the reader finding stale bytes:
    // only the first may skip.
    if (absl::IsInternal(round.status()) &&
        absl::StrContains(round.status().message(), "cannot pin")) {
      GTEST_SKIP() << round.status();
    }
    ASSERT_OK(round.status());
    EXPECT_EQ(round->bytes, 65536u);
    EXPECT_EQ(round->streaming_min, streaming_min);
    EXPECT_GT(round->round_us, 0);
  }
  EXPECT_THAT(ProbeCopyRound(options, 12, 0, 1), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ProbeCopyRound(options, 4096, 0, 0), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(LineProbeTest, OneCpuHasNothingToMeasure) {
  absl::StatusOr<LineRoundTrip> probe;
  std::thread alone([&] {
    cpu_set_t allowed, one;
    CPU_ZERO(&allowed);
    CPU_ZERO(&one);
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
      probe = absl::InternalError("sched_getaffinity failed");
      return;
    }
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &allowed)) {
        CPU_SET(cpu, &one);
        break;
      }
    }
    if (pthread_setaffinity_np(pthread_self(), sizeof(one), &one) != 0) {
      probe = absl::InternalError("cannot pin the test's thread");
      return;
    }
    probe = ProbeLineRoundTrip({});
  });
  alone.join();
  EXPECT_THAT(probe, StatusIs(absl::StatusCode::kFailedPrecondition,
                              ::testing::HasSubstr("needs two CPUs")));
}

}  // namespace
}  // namespace rdmaflow::bench
