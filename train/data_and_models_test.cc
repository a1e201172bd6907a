// The harness's data and models: idx files parse (and malformed ones are
// refused), Fashion-MNIST loads when Debian's package is installed (skips
// with a message otherwise), synthetic data is deterministic, and every
// model maps a batch to 10 logits with the same parameters for one seed.
#include <map>
#include <set>
#include <cstdio>
#include <fstream>
#include <string>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "train/fashion_mnist.h"
#include "train/models.h"

namespace rdmaflow::train {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

TEST(IdxTest, ParsesAPlainIdxFileAndRefusesATruncatedOne) {
  const std::string path = TempPath("tiny-idx1-ubyte");
  {
    std::ofstream out(path, std::ios::binary);
    const unsigned char bytes[] = {0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 3,
                                   1, 2, 3, 4, 5, 6};
    out.write(reinterpret_cast<const char*>(bytes), sizeof(bytes));
  }
  ASSERT_OK_AND_ASSIGN(torch::Tensor t, ReadIdxFile(path));
  EXPECT_EQ(t.sizes(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t[1][2].item<int>(), 6);
  {
    std::ofstream out(path, std::ios::binary);
    const unsigned char bytes[] = {0, 0, 8, 1, 0, 0, 0, 9, 1, 2};
    out.write(reinterpret_cast<const char*>(bytes), sizeof(bytes));
  }
  EXPECT_THAT(ReadIdxFile(path), StatusIs(absl::StatusCode::kDataLoss,
                                          HasSubstr("promises 9 bytes")));
  EXPECT_THAT(ReadIdxFile(TempPath("missing")),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("dataset-fashion-mnist")));
}

TEST(FashionMnistTest, LoadsDebiansPackage) {
  std::ifstream probe(std::string(kDefaultFashionMnistDir) +
                      "/t10k-labels-idx1-ubyte.gz");
  if (!probe) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed "
                    "(tools/setup.sh installs it)";
  }
  ASSERT_OK_AND_ASSIGN(Dataset test, LoadFashionMnist(kDefaultFashionMnistDir, "test"));
  EXPECT_EQ(test.size(), 10000);
  EXPECT_EQ(test.images.sizes(), (std::vector<int64_t>{10000, 1, 28, 28}));
  // Balanced classes: 1000 of each.
  EXPECT_EQ(test.labels.eq(7).sum().item<int64_t>(), 1000);
  EXPECT_NEAR(test.images.mean().item<double>(), 0.0, 0.05);
}

TEST(SyntheticTest, IsDeterministicPerSeed) {
  Dataset a = SyntheticDataset(64, 3, "train");
  Dataset b = SyntheticDataset(64, 3, "train");
  Dataset c = SyntheticDataset(64, 4, "train");
  EXPECT_TRUE(a.images.equal(b.images));
  EXPECT_TRUE(a.labels.equal(b.labels));
  EXPECT_FALSE(a.images.equal(c.images));
  EXPECT_LE(a.labels.max().item<int64_t>(), 9);
}

TEST(ModelsTest, EveryModelGivesTenLogitsAndIsSeeded) {
  torch::Tensor x = torch::randn({4, 1, 28, 28});
  for (const std::string& name : ModelNames()) {
    ASSERT_OK_AND_ASSIGN(Model m1, MakeModel(name, 5));
    ASSERT_OK_AND_ASSIGN(Model m2, MakeModel(name, 5));
    torch::Tensor y = m1.forward(x);
    EXPECT_EQ(y.sizes(), (std::vector<int64_t>{4, 10})) << name;
    EXPECT_TRUE(y.equal(m2.forward(x))) << name;
  }
  ASSERT_OK_AND_ASSIGN(Model vgg, MakeModel("vgg", 1));
  int64_t total = 0, fc = 0;
  for (const auto& p : vgg.module->named_parameters()) {
    total += p.value().numel();
    if (p.value().dim() == 2 || (p.value().dim() == 1 && p.value().numel() >= 1000)) {
      fc += p.value().numel();
    }
  }
  EXPECT_GT(static_cast<double>(fc) / total, 0.9);  // FC layers dominate
  EXPECT_THAT(MakeModel("alexnet", 1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mlp, lenet5, vgg, resnet")));
}

TEST(ModelsTest, TheSplitComposesToTheModelBeforeTheFirstLinearLayer) {
  const std::map<std::string, int64_t> activations = {
      {"mlp", 784}, {"lenet5", 400}, {"vgg", 3136}, {"resnet", 32}};
  for (const std::string& name : ModelNames()) {
    ASSERT_OK_AND_ASSIGN(Model model, MakeModel(name, 5));
    torch::NoGradGuard no_grad;
    torch::Tensor x = torch::randn({3, 1, 28, 28});
    torch::Tensor h = model.split.features(x);
    EXPECT_EQ(h.numel() / 3, activations.at(name)) << name;
    int64_t product = 1;
    for (int64_t d : model.split.activation_shape) product *= d;
    EXPECT_EQ(product, activations.at(name)) << name;
    EXPECT_TRUE(model.split.head(h).allclose(model.forward(x))) << name;
    // The head owns exactly the Linear layers' parameters.
    std::set<std::string> names;
    for (const auto& p : model.module->named_parameters()) names.insert(p.key());
    ASSERT_FALSE(model.split.head_parameters.empty()) << name;
    for (const std::string& p : model.split.head_parameters) {
      EXPECT_EQ(names.count(p), 1u) << name << " " << p;
      EXPECT_EQ(model.module->named_parameters()[p].dim() == 2 ||
                    model.module->named_parameters()[p].dim() == 1,
                true);
    }
  }
}

}  // namespace
}  // namespace rdmaflow::train
