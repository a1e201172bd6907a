// File: fashion_mnist.h
// -----------------------------------------------------------------------------
// Datasets for the training harness: Fashion-MNIST from Debian's
// dataset-fashion-mnist package (idx files, gzip-compressed, in
// /usr/share/datasets/fashion-mnist), or a synthetic stand-in of the same
// shape whose classes are learnable (each class a fixed random template
// plus noise), for machines without the package and for tests.
#ifndef RDMAFLOW_TRAIN_FASHION_MNIST_H_
#define RDMAFLOW_TRAIN_FASHION_MNIST_H_

#include <cstdint>
#include <string>

#include "ATen/core/Tensor.h"
#include "absl/status/statusor.h"
#include "train/sample_spec.h"

namespace rdmaflow::train {

inline constexpr char kDefaultFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

// Images [N, 1, 28, 28] float32, normalized (mean 0, std 1 over the
// training set's statistics); labels [N] int64 in 0..9. Value type.
struct Dataset {
  at::Tensor images;
  at::Tensor labels;
  int64_t size() const { return labels.size(0); }
};

// Reads one idx file of unsigned bytes (gzip-compressed or plain), of 1 to
// 4 dimensions and at most 1 GiB of data. kNotFound naming the path and the
// package that provides it; kDataLoss naming the path for a malformed file:
// a bad or truncated header, dimensions whose product overflows or exceeds
// 1 GiB, data shorter or longer than the header promises, corrupt gzip data.
// Memory grows with the bytes the file holds, never with the header's claim.
absl::StatusOr<at::Tensor> ReadIdxFile(const std::string& path);

// "train" (60000 images) or "test" (10000) from `dir`. kDataLoss when the
// images are not N x 28 x 28, the labels not N of 0..9, or N is 0.
absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir,
                                         const std::string& split);

// `n` synthetic samples of `sample` (by default Fashion-MNIST's shape and
// 10 classes), learnable: float samples are a fixed random template per
// class plus noise; token ids (int64) are drawn half from a band of the
// vocabulary that belongs to the class, half uniformly. The same `seed`
// gives the same data, and the train and test splits of one seed share
// their classes' templates. `images` holds the samples whatever they are.
Dataset SyntheticDataset(int64_t n, uint64_t seed, const std::string& split,
                         const SampleSpec& sample = {});

}  // namespace rdmaflow::train

#endif  // RDMAFLOW_TRAIN_FASHION_MNIST_H_
