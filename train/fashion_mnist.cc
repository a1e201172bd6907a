// File: fashion_mnist.cc
#include "train/fashion_mnist.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "ATen/CPUGeneratorImpl.h"
#include "ATen/ops/empty.h"
#include "ATen/ops/rand.h"
#include "ATen/ops/randint.h"
#include "ATen/ops/randn.h"
#include "ATen/ops/where.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rdmaflow::train {
namespace {

constexpr double kMean = 0.2860;  // Fashion-MNIST training set, pixels / 255
constexpr double kStd = 0.3530;

// Fashion-MNIST's largest file, the training images, holds 47 MB; a header
// claiming more than 1 GiB is corrupt, not data to make room for.
constexpr uint64_t kMaxIdxBytes = uint64_t{1} << 30;
constexpr int kMaxIdxDims = 4;

uint32_t BigEndian(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) |
         uint32_t{p[3]};
}

}  // namespace

absl::StatusOr<at::Tensor> ReadIdxFile(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");  // reads plain files too
  if (file == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "cannot open ", path,
        ": install Debian's dataset-fashion-mnist (apt-get install "
        "dataset-fashion-mnist), point --data_dir at the idx files, or train "
        "on --synthetic data"));
  }
  // Reads up to `n` bytes (fewer only at the end of the data); -1 on error.
  auto read = [&](unsigned char* out, size_t n) -> int64_t {
    size_t got = 0;
    while (got < n) {
      const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - got, 1 << 20));
      const int r = gzread(file, out + got, chunk);
      if (r < 0) return -1;
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    return static_cast<int64_t>(got);
  };
  auto result = [&]() -> absl::StatusOr<at::Tensor> {
    // The header: 0, 0, 0x08 (unsigned bytes), the number of dims, then
    // each dim as a 32-bit big-endian count.
    unsigned char header[4 + 4 * kMaxIdxDims];
    int64_t got = read(header, 4);
    if (got != 4 || header[0] != 0 || header[1] != 0 || header[2] != 0x08) {
      return absl::DataLossError(absl::StrCat(
          path, " is not an idx file of unsigned bytes (corrupt or truncated?)"));
    }
    const int dims = header[3];
    if (dims < 1 || dims > kMaxIdxDims) {
      return absl::DataLossError(absl::StrCat(path, ": bad idx header: ", dims,
                                              " dimensions (1..", kMaxIdxDims, ")"));
    }
    got = read(header + 4, 4 * size_t(dims));
    if (got != 4 * dims) {
      return absl::DataLossError(absl::StrCat(
          path, ": bad idx header: truncated after ", 4 + std::max<int64_t>(got, 0),
          " bytes, the header of ", dims, " dimensions has ", 4 + 4 * dims));
    }
    // The dims multiply into the size of the data: untrusted until checked
    // without wrapping and against the bytes the file holds.
    std::vector<int64_t> shape;
    for (int d = 0; d < dims; ++d) shape.push_back(BigEndian(&header[4 + 4 * d]));
    uint64_t elements = 1;
    bool overflow = false;
    for (int64_t d : shape) {
      overflow |= __builtin_mul_overflow(elements, static_cast<uint64_t>(d), &elements);
    }
    if (std::find(shape.begin(), shape.end(), 0) != shape.end()) {
      elements = 0;  // empty, however large the other dimensions
    } else if (overflow || elements > kMaxIdxBytes) {
      return absl::DataLossError(absl::StrCat(
          path, ": bad idx header: dimensions ", absl::StrJoin(shape, " x "),
          " exceed ", kMaxIdxBytes, " bytes of data (corrupt or not an idx file?)"));
    }
    // Read what the header promises, and one byte more to find trailing
    // data; memory grows with the bytes that are there, not with the claim.
    std::vector<unsigned char> data;
    size_t have = 0;
    while (true) {
      const size_t want = std::min<uint64_t>(elements + 1 - have, 1 << 24);
      data.resize(have + want);
      got = read(data.data() + have, want);
      if (got < 0) break;
      have += static_cast<size_t>(got);
      if (static_cast<size_t>(got) < want || have == elements + 1) break;
    }
    if (got < 0) {
      return absl::DataLossError(absl::StrCat(path, ": corrupt compressed data"));
    }
    const size_t header_bytes = 4 + 4 * size_t(dims);
    if (have != elements) {
      return absl::DataLossError(absl::StrCat(
          path, ": the header promises ", elements, " bytes of data, the file has ",
          have > elements ? "more" : absl::StrCat(have), " after its ", header_bytes,
          "-byte header (truncated or corrupt?)"));
    }
    at::Tensor out = at::empty(shape, at::kByte);
    if (elements > 0) std::memcpy(out.data_ptr<uint8_t>(), data.data(), elements);
    return out;
  }();
  gzclose(file);
  return result;
}

absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir,
                                         const std::string& split) {
  if (split != "train" && split != "test") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown split '", split, "' (train or test)"));
  }
  const std::string prefix = split == "train" ? "train" : "t10k";
  absl::StatusOr<at::Tensor> images =
      ReadIdxFile(absl::StrCat(dir, "/", prefix, "-images-idx3-ubyte.gz"));
  if (!images.ok()) return images.status();
  absl::StatusOr<at::Tensor> labels =
      ReadIdxFile(absl::StrCat(dir, "/", prefix, "-labels-idx1-ubyte.gz"));
  if (!labels.ok()) return labels.status();
  if (images->dim() != 3 || images->size(1) != 28 || images->size(2) != 28 ||
      labels->dim() != 1 || labels->size(0) != images->size(0)) {
    return absl::DataLossError(absl::StrCat(
        dir, ": the ", split, " images and labels do not match (",
        images->size(0), " images of ", images->dim(), " dims, ",
        labels->size(0), " labels)"));
  }
  if (labels->size(0) == 0) {
    return absl::DataLossError(absl::StrCat(dir, ": the ", split, " split has no samples"));
  }
  Dataset out;
  // Tensor methods, not operators: ATen/TensorOperators.h costs every
  // operator's header (docs/build.md).
  out.images = images->to(at::kFloat).div(255.0).sub(kMean).div(kStd).unsqueeze(1).contiguous();
  out.labels = labels->to(at::kLong);
  if (out.labels.max().item<int64_t>() > 9) {
    return absl::DataLossError(absl::StrCat(dir, ": labels beyond 9"));
  }
  return out;
}

Dataset SyntheticDataset(int64_t n, uint64_t seed, const std::string& split,
                         const SampleSpec& sample) {
  std::vector<int64_t> batch = {n};
  batch.insert(batch.end(), sample.shape.begin(), sample.shape.end());
  at::Generator gen =
      at::detail::createCPUGenerator(seed * 2 + (split == "train" ? 1 : 2));
  Dataset out;
  out.labels = at::randint(0, sample.classes, {n}, gen, at::kLong);
  if (sample.int64) {
    // Half the tokens from the class's band of the vocabulary.
    const int64_t band = std::max<int64_t>(sample.vocab / sample.classes, 1);
    std::vector<int64_t> ones(sample.shape.size(), 1);
    std::vector<int64_t> label_shape = {n};
    label_shape.insert(label_shape.end(), ones.begin(), ones.end());
    at::Tensor own = out.labels.view(label_shape)
                         .mul(band)
                         .add(at::randint(0, band, batch, gen, at::kLong))
                         .remainder(sample.vocab);
    at::Tensor any = at::randint(0, sample.vocab, batch, gen, at::kLong);
    out.images = at::where(at::rand(batch, gen).lt(0.5), own, any).contiguous();
    return out;
  }
  at::Generator templates_gen = at::detail::createCPUGenerator(seed);
  std::vector<int64_t> template_shape = {sample.classes};
  template_shape.insert(template_shape.end(), sample.shape.begin(), sample.shape.end());
  at::Tensor templates = at::randn(template_shape, templates_gen, at::kFloat);
  out.images = templates.index_select(0, out.labels)
                   .add(at::randn(batch, gen, at::kFloat).mul(1.5))
                   .contiguous();
  return out;
}

}  // namespace rdmaflow::train
