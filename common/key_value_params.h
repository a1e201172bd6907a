// File: key_value_params.h
// -----------------------------------------------------------------------------
// Reads "key=value" settings (a strategy's parameters, a gradient codec's)
// with one rule for every owner: each known key is parsed and range-checked,
// and any key left over is an error listing the known ones. Messages name
// the owner ("allreduce bucket_bytes must be ...", "topk ratio must be ...").
//
//   KeyValueParams p("allreduce", options.params);
//   RETURN_IF_ERROR(p.Size("bucket_bytes", 1, &bucket_bytes));
//   RETURN_IF_ERROR(p.Done());
#ifndef RDMAFLOW_COMMON_KEY_VALUE_PARAMS_H_
#define RDMAFLOW_COMMON_KEY_VALUE_PARAMS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rdmaflow {

// Thread-compatible.
class KeyValueParams {
 public:
  KeyValueParams(std::string owner, std::map<std::string, std::string> params)
      : owner_(std::move(owner)), params_(std::move(params)) {}
  // If `key` is present, parses it into *value (an integer >= minimum);
  // kInvalidArgument naming the key and value otherwise. Absent keys leave
  // *value as it is.
  absl::Status Int(const std::string& key, int64_t minimum, int64_t* value);
  absl::Status Int(const std::string& key, int minimum, int* value);
  // A real number in [minimum, maximum].
  absl::Status Real(const std::string& key, double minimum, double maximum,
                    double* value);
  // Byte sizes also accept K, M and G suffixes (powers of 1024).
  absl::Status Size(const std::string& key, int64_t minimum, int64_t* value);
  // The same, or "auto", which sets *value to `automatic`.
  absl::Status SizeOrAuto(const std::string& key, int64_t minimum, int64_t automatic,
                          int64_t* value);
  // One of `choices`.
  absl::Status Choice(const std::string& key,
                      const std::vector<std::string>& choices, std::string* value);
  // kInvalidArgument if a key was never asked for.
  absl::Status Done() const;

 private:
  const std::string owner_;
  std::map<std::string, std::string> params_;
  std::vector<std::string> known_;
};

// Parses "key=value,key=value" (empty items skipped). kInvalidArgument for
// an item without '=', with an empty key, or with a key given twice (which
// of the two was meant is not ours to guess), naming `what` ("transport
// parameter", "topk setting").
absl::StatusOr<std::map<std::string, std::string>> ParseKeyValues(absl::string_view text,
                                                                  absl::string_view what);

}  // namespace rdmaflow

#endif  // RDMAFLOW_COMMON_KEY_VALUE_PARAMS_H_
