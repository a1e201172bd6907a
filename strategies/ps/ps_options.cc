// File: ps_options.cc
#include "strategies/ps/ps_options.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace rdmaflow::strategies::ps {

absl::StatusOr<PsOptions> PsOptions::Parse(
    const std::map<std::string, std::string>& params) {
  PsOptions options;
  bool prefetch_given = false;
  for (const auto& [key, value] : params) {
    if (key == "servers") {
      if (!absl::SimpleAtoi(value, &options.servers) || options.servers < 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ps servers must be a positive count, got '", value, "'"));
      }
    } else if (key == "sync") {
      ASSIGN_OR_RETURN(options.sync, SyncPolicy::Parse(value));
    } else if (key == "pull") {
      if (value != "read" && value != "send") {
        return absl::InvalidArgumentError(absl::StrCat(
            "ps pull must be 'read' (one-sided READ) or 'send', got '", value,
            "'"));
      }
      options.pull_by_read = value == "read";
    } else if (key == "copies") {
      if (!absl::SimpleAtoi(value, &options.copies) || options.copies < 2) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ps copies must be at least 2, got '", value, "'"));
      }
    } else if (key == "overlap") {
      if (value != "on" && value != "off") {
        return absl::InvalidArgumentError(
            absl::StrCat("ps overlap must be 'on' or 'off', got '", value, "'"));
      }
      options.overlap = value == "on";
    } else if (key == "slice_bytes") {
      if (value == "auto") {
        options.slice_bytes = 0;
      } else if (!absl::SimpleAtoi(value, &options.slice_bytes) || options.slice_bytes < 4 ||
                 options.slice_bytes % 4 != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ps slice_bytes must be auto or a positive multiple of 4 (whole float32 elements), "
            "got '", value, "'"));
      }
    } else if (key == "prefetch") {
      if (value != "on" && value != "off") {
        return absl::InvalidArgumentError(
            absl::StrCat("ps prefetch must be 'on' or 'off', got '", value, "'"));
      }
      options.prefetch = value == "on";
      prefetch_given = true;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown ps parameter '", key,
          "'; known: servers, sync, pull, copies, overlap, slice_bytes, prefetch"));
    }
  }
  if (options.overlap && !options.pull_by_read) {
    return absl::InvalidArgumentError(
        "ps overlap=on pulls each slice by one-sided READ as soon as its server published it; "
        "it needs pull=read");
  }
  if (prefetch_given && !options.overlap) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ps prefetch pulls the next step's slices while backward runs, on the communication "
        "thread that overlap=on starts; this job has overlap=off (sync=",
        options.sync.ToString(), ")"));
  }
  // On by default only under bsp, where a prefetched slice holds exactly
  // the next step's values; the other modes take it when asked (a slice
  // pulled earlier holds fewer of the others' updates).
  if (!prefetch_given) options.prefetch = options.overlap && options.sync.mode == SyncMode::kBsp;
  return options;
}

}  // namespace rdmaflow::strategies::ps
