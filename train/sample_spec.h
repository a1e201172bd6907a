// File: sample_spec.h
// -----------------------------------------------------------------------------
// What one training sample is (the model's input without the batch
// dimension) and how many classes there are: Fashion-MNIST's 1x28x28 float32
// images of 10 classes by default, or what `rdmaflow_train --input` and
// `--classes` say for a user's model (docs/bring_your_model.md).
#ifndef RDMAFLOW_TRAIN_SAMPLE_SPEC_H_
#define RDMAFLOW_TRAIN_SAMPLE_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rdmaflow::train {

struct SampleSpec {
  std::vector<int64_t> shape = {1, 28, 28};
  bool int64 = false;    // token ids in [0, vocab) instead of float32 values
  int64_t vocab = 100;   // token ids of synthetic int64 samples
  int64_t classes = 10;

  // Fashion-MNIST's samples: the harness trains on the real data set.
  bool IsFashionMnist() const {
    return !int64 && classes == 10 && shape == std::vector<int64_t>{1, 28, 28};
  }
  // "1x28x28", "16:int64".
  std::string ToString() const;
};

// "1x28x28" or "16:int64" (one sample, no batch dimension): 1..8 dimensions
// of 1..65536. kInvalidArgument naming the bad part.
absl::StatusOr<std::vector<int64_t>> ParseSampleShape(absl::string_view text, bool* int64);

}  // namespace rdmaflow::train

#endif  // RDMAFLOW_TRAIN_SAMPLE_SPEC_H_
