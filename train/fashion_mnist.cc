// File: fashion_mnist.cc
#include "train/fashion_mnist.h"

#include <zlib.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace rdmaflow::train {
namespace {

constexpr double kMean = 0.2860;  // Fashion-MNIST training set, pixels / 255
constexpr double kStd = 0.3530;

uint32_t BigEndian(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) |
         uint32_t{p[3]};
}

}  // namespace

absl::StatusOr<torch::Tensor> ReadIdxFile(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");  // reads plain files too
  if (file == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "cannot open ", path,
        ": install Debian's dataset-fashion-mnist (apt-get install "
        "dataset-fashion-mnist), point --data_dir at the idx files, or train "
        "on --synthetic data"));
  }
  std::vector<unsigned char> bytes;
  unsigned char buffer[1 << 16];
  int n;
  while ((n = gzread(file, buffer, sizeof(buffer))) > 0) {
    bytes.insert(bytes.end(), buffer, buffer + n);
  }
  const bool failed = n < 0;
  gzclose(file);
  if (failed || bytes.size() < 4 || bytes[0] != 0 || bytes[1] != 0 ||
      bytes[2] != 0x08) {
    return absl::DataLossError(absl::StrCat(
        path, " is not an idx file of unsigned bytes (corrupt or truncated?)"));
  }
  const int dims = bytes[3];
  if (dims < 1 || dims > 4 || bytes.size() < 4 + 4 * size_t(dims)) {
    return absl::DataLossError(absl::StrCat(path, ": bad idx header"));
  }
  std::vector<int64_t> shape;
  int64_t elements = 1;
  for (int d = 0; d < dims; ++d) {
    shape.push_back(BigEndian(&bytes[4 + 4 * d]));
    elements *= shape.back();
  }
  const size_t header = 4 + 4 * size_t(dims);
  if (bytes.size() != header + size_t(elements)) {
    return absl::DataLossError(absl::StrCat(
        path, ": the header promises ", elements, " bytes of data, the file has ",
        bytes.size() - header));
  }
  torch::Tensor out = torch::empty(shape, torch::kUInt8);
  std::memcpy(out.data_ptr<uint8_t>(), bytes.data() + header, elements);
  return out;
}

absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir,
                                         const std::string& split) {
  if (split != "train" && split != "test") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown split '", split, "' (train or test)"));
  }
  const std::string prefix = split == "train" ? "train" : "t10k";
  absl::StatusOr<torch::Tensor> images =
      ReadIdxFile(absl::StrCat(dir, "/", prefix, "-images-idx3-ubyte.gz"));
  if (!images.ok()) return images.status();
  absl::StatusOr<torch::Tensor> labels =
      ReadIdxFile(absl::StrCat(dir, "/", prefix, "-labels-idx1-ubyte.gz"));
  if (!labels.ok()) return labels.status();
  if (images->dim() != 3 || images->size(1) != 28 || images->size(2) != 28 ||
      labels->dim() != 1 || labels->size(0) != images->size(0)) {
    return absl::DataLossError(absl::StrCat(
        dir, ": the ", split, " images and labels do not match (",
        images->size(0), " images of ", images->dim(), " dims, ",
        labels->size(0), " labels)"));
  }
  Dataset out;
  out.images = ((images->to(torch::kFloat32) / 255.0 - kMean) / kStd)
                   .unsqueeze(1)
                   .contiguous();
  out.labels = labels->to(torch::kInt64);
  if (out.labels.max().item<int64_t>() > 9) {
    return absl::DataLossError(absl::StrCat(dir, ": labels beyond 9"));
  }
  return out;
}

Dataset SyntheticDataset(int64_t n, uint64_t seed, const std::string& split) {
  torch::Generator templates_gen = at::detail::createCPUGenerator(seed);
  torch::Tensor templates =
      torch::randn({10, 1, 28, 28}, templates_gen, torch::kFloat32);
  torch::Generator gen =
      at::detail::createCPUGenerator(seed * 2 + (split == "train" ? 1 : 2));
  Dataset out;
  out.labels = torch::randint(0, 10, {n}, gen, torch::kInt64);
  out.images = (templates.index_select(0, out.labels) +
                1.5 * torch::randn({n, 1, 28, 28}, gen, torch::kFloat32))
                   .contiguous();
  return out;
}

}  // namespace rdmaflow::train
