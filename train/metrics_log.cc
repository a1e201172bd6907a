// File: metrics_log.cc
#include "train/metrics_log.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace rdmaflow::train {

absl::StatusOr<std::unique_ptr<MetricsLog>> MetricsLog::Open(
    const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  std::fprintf(file,
               "step,elapsed_s,loss,batch_accuracy,samples_per_s,compute_ms,"
               "comm_ms,wait_ms,staleness,test_accuracy,overlap_ms\n");
  return std::unique_ptr<MetricsLog>(new MetricsLog(file));
}

MetricsLog::~MetricsLog() { std::fclose(file_); }

void MetricsLog::Add(const StepRecord& r) {
  std::fprintf(file_, "%lld,%.4f,%.5f,%.4f,%.1f,%.3f,%.3f,%.3f,%lld,",
               static_cast<long long>(r.step), r.elapsed_s, r.loss,
               r.batch_accuracy, r.samples_per_s, r.compute_ms, r.comm_ms,
               r.wait_ms, static_cast<long long>(r.staleness));
  if (r.test_accuracy >= 0) std::fprintf(file_, "%.4f", r.test_accuracy);
  std::fprintf(file_, ",%.3f\n", r.overlap_ms);
}

Progress::Progress(std::string label, int64_t total)
    : label_(std::move(label)),
      total_(std::max<int64_t>(total, 1)),
      tty_(isatty(STDERR_FILENO) == 1) {}

void Progress::Update(int64_t done, const std::string& status) {
  if (tty_) {
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * done / total_);
    std::fprintf(stderr, "\r%s [%s%s] %lld/%lld %s\033[K", label_.c_str(),
                 std::string(filled, '#').c_str(),
                 std::string(kWidth - filled, '.').c_str(),
                 static_cast<long long>(done), static_cast<long long>(total_),
                 status.c_str());
    return;
  }
  if (done < next_line_ && done != total_) return;
  next_line_ = done + std::max<int64_t>(total_ / 20, 1);
  std::fprintf(stderr, "%s %lld/%lld %s\n", label_.c_str(),
               static_cast<long long>(done), static_cast<long long>(total_),
               status.c_str());
}

void Progress::Finish(const std::string& status) {
  if (tty_) std::fprintf(stderr, "\n");
  std::fprintf(stderr, "%s done: %s\n", label_.c_str(), status.c_str());
}

}  // namespace rdmaflow::train
