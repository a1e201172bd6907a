// The harness's data and models: idx files parse, and malformed ones are
// refused (forged dimensions that overflow, truncated or corrupt data,
// empty splits; random headers against the rule); Fashion-MNIST loads when
// Debian's package is installed (skips with a message otherwise); synthetic
// data is deterministic; every model maps a batch to 10 logits with the same
// parameters for one seed; rdmaflow_train's flags are each checked, by
// name, before any rank starts (--local bounded).
#include <sys/wait.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torch/torch.h"
#include "train/fashion_mnist.h"
#include "train/models.h"
#include "train/trainer.h"

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

// A plain idx file: magic 0, 0, 8 (unsigned bytes), `dims.size()` (as the
// count byte, unless `count` says otherwise), each dim big-endian, `data`.
std::string IdxBytes(const std::vector<uint32_t>& dims, const std::string& data,
                     int count = -1) {
  std::string bytes = {0, 0, 8, static_cast<char>(count >= 0 ? count : dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(char(d >> shift));
  }
  return bytes + data;
}

std::string WriteFile(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary).write(bytes.data(), bytes.size());
  return path;
}

std::string WriteGzip(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  gzFile file = gzopen(path.c_str(), "wb");
  EXPECT_NE(file, nullptr);
  EXPECT_EQ(gzwrite(file, bytes.data(), bytes.size()), static_cast<int>(bytes.size()));
  gzclose(file);
  return path;
}

TEST(IdxTest, DimensionsThatOverflowAreRefusedBeforeAllocating) {
  // 65536^4 = 2^64 wrapped to 0 = the data there is (an exception from
  // torch::empty before); 3 x (2^32 - 1) overflowed int64.
  EXPECT_THAT(ReadIdxFile(WriteFile("wrap", IdxBytes({65536, 65536, 65536, 65536}, ""))),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("dimensions 65536 x 65536 x 65536 x 65536 exceed")));
  EXPECT_THAT(
      ReadIdxFile(WriteFile("int64", IdxBytes({~0u, ~0u, ~0u}, "abc"))),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("exceed 1073741824 bytes")));
  // Within the product's range but beyond 1 GiB: refused without reading.
  EXPECT_THAT(ReadIdxFile(WriteFile("big", IdxBytes({65536, 16385}, "x"))),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("65536 x 16385 exceed")));
  // Exactly 1 GiB promised, 1 byte there: the size check, not an allocation.
  EXPECT_THAT(ReadIdxFile(WriteFile("gib", IdxBytes({65536, 16384}, "x"))),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("promises 1073741824 bytes of data, the file has 1 ")));
}

TEST(IdxTest, TruncatedAndForgedHeadersAreRefused) {
  EXPECT_THAT(ReadIdxFile(WriteFile("empty", "")),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("not an idx file")));
  EXPECT_THAT(ReadIdxFile(WriteFile("float", std::string("\0\0\x0d\x01", 4))),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("not an idx file")));
  EXPECT_THAT(ReadIdxFile(WriteFile("dims0", IdxBytes({}, "abc"))),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("0 dimensions (1..4)")));
  EXPECT_THAT(ReadIdxFile(WriteFile("dims5", IdxBytes({1, 1, 1, 1, 1}, "a"))),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("5 dimensions")));
  EXPECT_THAT(ReadIdxFile(WriteFile("dims255", IdxBytes({1}, "a", 255))),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("255 dimensions")));
  // The header says 3 dims and stops inside the second.
  EXPECT_THAT(ReadIdxFile(WriteFile("short", IdxBytes({2, 2, 2}, "").substr(0, 10))),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("truncated after 10 bytes, the header of 3 dimensions "
                                 "has 16")));
  EXPECT_THAT(ReadIdxFile(WriteFile("trailing", IdxBytes({2}, "abc"))),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("promises 2 bytes of data, the file has more")));
  // A dimension of 0 is an empty tensor, not an error.
  ASSERT_OK_AND_ASSIGN(torch::Tensor empty, ReadIdxFile(WriteFile("zero", IdxBytes({0, 28}, ""))));
  EXPECT_EQ(empty.sizes(), (std::vector<int64_t>{0, 28}));
}

TEST(IdxTest, GzipFilesParseAndCorruptOnesAreRefused) {
  std::string data(3000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = char(i * 7);
  const std::string idx = IdxBytes({3, 1000}, data);
  ASSERT_OK_AND_ASSIGN(torch::Tensor t, ReadIdxFile(WriteGzip("ok.gz", idx)));
  EXPECT_EQ(t.sizes(), (std::vector<int64_t>{3, 1000}));
  EXPECT_EQ(t[2][999].item<int>(), uint8_t(2999 * 7));
  // The compressed stream cut in half.
  const std::string path = WriteGzip("cut.gz", idx);
  std::ifstream in(path, std::ios::binary);
  std::string gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(ReadIdxFile(WriteFile("cut.gz", gz.substr(0, gz.size() / 2))),
              StatusIs(absl::StatusCode::kDataLoss));
  // Compressed, promising more than there is.
  EXPECT_THAT(ReadIdxFile(WriteGzip("liar.gz", IdxBytes({1000, 1000}, data))),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("promises 1000000 bytes of data, the file has 3000")));
}

// Random headers (dimension counts 0..6, dimensions at the edges of their
// range, products that wrap) over random amounts of data: ReadIdxFile never crashes, and
// accepts exactly the files whose data is the product of 1..4 dimensions.
TEST(IdxTest, RandomHeadersAreAcceptedExactlyWhenConsistent) {
  const uint32_t edges[] = {0, 1, 2, 3, 7, 64, 255, 256, 65535, 65536, 1u << 31, ~0u};
  const uint64_t seed = 99;
  std::mt19937_64 random(seed);
  int accepted = 0;
  for (int i = 0; i < 500; ++i) {
    std::vector<uint32_t> dims(random() % 7);
    unsigned __int128 product = 1;
    for (uint32_t& d : dims) {
      d = random() % 3 == 0 ? random() % 5 : edges[random() % std::size(edges)];
      product *= d;
    }
    // Often the right amount of data, or what the product wrapped to 64
    // bits says (a header forged against unchecked arithmetic), else a near
    // miss or anything.
    size_t length = random() % 40;
    const uint64_t wrapped = static_cast<uint64_t>(product);
    if (product < 40 && random() % 2 == 0) {
      length = static_cast<size_t>(product) + (random() % 3 == 0 ? 1 : 0);
    } else if (wrapped < 40 && random() % 2 == 0) {
      length = wrapped;
    }
    const std::string data(length, 'd');
    const bool valid = !dims.empty() && dims.size() <= 4 && product == length;
    absl::StatusOr<torch::Tensor> t =
        ReadIdxFile(WriteFile("random", IdxBytes(dims, data)));
    SCOPED_TRACE(absl::StrCat("seed ", seed, " case ", i, ": dims ",
                              absl::StrJoin(dims, " x "), ", ", length, " bytes"));
    if (valid) {
      ASSERT_OK(t.status());
      EXPECT_EQ(t->numel(), static_cast<int64_t>(length));
      ++accepted;
    } else {
      EXPECT_THAT(t, StatusIs(absl::StatusCode::kDataLoss));
    }
  }
  EXPECT_GE(accepted, 30);  // the seed exercises both sides
}

TEST(FashionMnistTest, RefusesAnEmptySplit) {
  // 0 images of 28 x 28 and 0 labels agree, but label checks ran max() on
  // nothing (an exception) before.
  const std::string dir = TempPath("empty_split");
  std::filesystem::create_directories(dir);
  WriteFile("empty_split/t10k-images-idx3-ubyte.gz", IdxBytes({0, 28, 28}, ""));
  WriteFile("empty_split/t10k-labels-idx1-ubyte.gz", IdxBytes({0}, ""));
  EXPECT_THAT(LoadFashionMnist(dir, "test"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("has no samples")));
  // Images of another shape, and labels beyond 9.
  WriteFile("empty_split/t10k-images-idx3-ubyte.gz", IdxBytes({1, 28}, std::string(28, 0)));
  WriteFile("empty_split/t10k-labels-idx1-ubyte.gz", IdxBytes({1}, "\x0a"));
  EXPECT_THAT(LoadFashionMnist(dir, "test"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("do not match")));
  WriteFile("empty_split/t10k-images-idx3-ubyte.gz",
            IdxBytes({1, 28, 28}, std::string(28 * 28, 0)));
  EXPECT_THAT(LoadFashionMnist(dir, "test"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("labels beyond 9")));
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

TEST(SyntheticTest, TakesAnySampleShapeAndTokenIds) {
  SampleSpec images;
  images.shape = {3, 8, 8};
  images.classes = 4;
  Dataset a = SyntheticDataset(50, 3, "train", images);
  EXPECT_EQ(a.images.sizes(), (std::vector<int64_t>{50, 3, 8, 8}));
  EXPECT_LE(a.labels.max().item<int64_t>(), 3);
  SampleSpec tokens;
  tokens.shape = {16};
  tokens.int64 = true;
  tokens.vocab = 40;
  tokens.classes = 4;
  Dataset t = SyntheticDataset(200, 3, "train", tokens);
  EXPECT_EQ(t.images.scalar_type(), torch::kInt64);
  EXPECT_EQ(t.images.sizes(), (std::vector<int64_t>{200, 16}));
  EXPECT_GE(t.images.min().item<int64_t>(), 0);
  EXPECT_LT(t.images.max().item<int64_t>(), 40);
  // Learnable: a sample's tokens lean to its class's band of 10 ids.
  torch::Tensor band = t.images.div(10, "floor");
  torch::Tensor own = band.eq(t.labels.view({200, 1})).to(torch::kFloat32).mean();
  EXPECT_GT(own.item<double>(), 0.5);
  EXPECT_TRUE(SyntheticDataset(200, 3, "train", tokens).images.equal(t.images));
  // The default is Fashion-MNIST's shape, unchanged.
  EXPECT_TRUE(SampleSpec{}.IsFashionMnist());
  EXPECT_FALSE(images.IsFashionMnist());
}

TEST(SampleSpecTest, ParsesShapesAndRefusesBadOnes) {
  bool int64 = true;
  ASSERT_OK_AND_ASSIGN(std::vector<int64_t> shape, ParseSampleShape("3x32x32", &int64));
  EXPECT_EQ(shape, (std::vector<int64_t>{3, 32, 32}));
  EXPECT_FALSE(int64);
  ASSERT_OK_AND_ASSIGN(shape, ParseSampleShape("16:int64", &int64));
  EXPECT_EQ(shape, (std::vector<int64_t>{16}));
  EXPECT_TRUE(int64);
  for (const char* bad : {"", "3x", "0x4", "4:complex", "4:float16", "1x2x3x4x5x6x7x8x9"}) {
    EXPECT_THAT(ParseSampleShape(bad, &int64),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--input"))) << bad;
  }
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

// rdmaflow_train's flags, checked before any process starts.
TrainConfig ValidConfig() {
  TrainConfig config;
  config.synthetic = true;  // no dataset needed
  config.strategy_params = {{"servers", "1"}, {"sync", "bsp"}};
  return config;
}

TEST(TrainFlagsTest, EachBadFlagIsNamed) {
  ASSERT_OK(ValidateTrainConfig(ValidConfig(), 3));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::pair<std::function<void(TrainConfig&)>, std::string>> cases = {
      {[](TrainConfig& c) { c.steps = 0; }, "--steps"},
      {[](TrainConfig& c) { c.batch_size = 0; }, "--batch_size must be in 1..65536"},
      {[](TrainConfig& c) { c.batch_size = kMaxBatchSize + 1; }, "--batch_size"},
      {[](TrainConfig& c) { c.batch_size = -1; }, "--batch_size"},
      {[&](TrainConfig& c) { c.learning_rate = nan; }, "--lr"},
      {[&](TrainConfig& c) { c.learning_rate = inf; }, "--lr"},
      {[](TrainConfig& c) { c.learning_rate = 0; }, "--lr"},
      {[](TrainConfig& c) { c.momentum = 1; }, "--momentum"},
      {[&](TrainConfig& c) { c.momentum = nan; }, "--momentum"},
      {[](TrainConfig& c) { c.slow_factor = 0.5; }, "--slow_factor"},
      {[&](TrainConfig& c) { c.slow_factor = inf; }, "--slow_factor"},
      {[](TrainConfig& c) { c.slow_rank = 3; }, "--slow_rank must be -1 (nobody) or a rank in 0..2"},
      {[](TrainConfig& c) { c.slow_rank = -2; }, "--slow_rank"},
      {[](TrainConfig& c) { c.kill_rank = 0; }, "--kill_rank must be -1 (nobody) or a rank in 1..2"},
      {[](TrainConfig& c) { c.kill_rank = 3; }, "--kill_rank"},
      {[](TrainConfig& c) { c.kill_rank = -7; }, "--kill_rank"},
      {[](TrainConfig& c) { c.kill_rank = 2, c.kill_step = 300; }, "--kill_step must be in 0..299"},
      {[](TrainConfig& c) { c.kill_rank = 2, c.kill_step = -1; }, "--kill_step"},
      {[](TrainConfig& c) { c.restart_killed = true; }, "--restart_killed needs --kill_rank"},
      {[](TrainConfig& c) { c.kill_rank = 2, c.restart_killed = true; },
       "strategy 'ps' cannot take a restarted rank back"},
      {[](TrainConfig& c) { c.eval_every = -1; }, "--eval_every"},
      {[](TrainConfig& c) { c.eval_samples = -1; }, "--eval_samples"},
      {[](TrainConfig& c) { c.timeout = absl::ZeroDuration(); }, "--timeout_s"},
      {[](TrainConfig& c) { c.timeout = absl::InfiniteDuration(); }, "--timeout_s"},
      {[](TrainConfig& c) { c.synthetic_samples = 0; }, "--synthetic_samples must be in"},
      {[](TrainConfig& c) { c.synthetic_samples = kMaxSyntheticSamples + 1; },
       "--synthetic_samples"},
      {[](TrainConfig& c) { c.synthetic_samples = 191; }, "do not give each of 3 ranks a batch"},
      {[](TrainConfig& c) { c.synthetic = false, c.data_dir = TempPath("no_data"); },
       "--data_dir: cannot read"},
      {[](TrainConfig& c) { c.log_prefix = TempPath("no_dir/run"); }, "--log_prefix"},
      {[](TrainConfig& c) { c.model = "alexnet"; }, "--model 'alexnet' is unknown; models: mlp"},
      {[](TrainConfig& c) { c.strategy = "hogwild"; }, "--strategy 'hogwild'"},
      {[](TrainConfig& c) { c.strategy_params["copies"] = "1"; }, "copies must be at least 2"},
      {[](TrainConfig& c) { c.strategy_params["servers"] = "3"; },
       "--servers 3 leaves no worker among 3 ranks"},
      {[](TrainConfig& c) { c.communicator = "mpi"; }, "--communicator 'mpi'"},
      {[](TrainConfig& c) { c.codec = "topk:ratio=5"; }, "--codec: topk ratio must be"},
      {[](TrainConfig& c) { c.transport = "tcp"; }, "--transport 'tcp' is unknown"},
      {[](TrainConfig& c) { c.transport_params = "tls"; }, "--transport_params"},
      {[](TrainConfig& c) { c.sample.shape = {3, 32, 32}; },
       "--input and --classes are for a TorchScript model"},
      {[](TrainConfig& c) { c.sample.classes = 1; }, "--classes must be in 2..100000"},
      {[](TrainConfig& c) { c.model = "x.pt", c.sample.shape = {3, 224, 224}; },
       "would take more than 4 GiB a rank"},
      {[](TrainConfig& c) { c.model = "x.pt", c.sample.shape = {1 << 20, 1 << 20, 1 << 20}; },
       "would take more than 4 GiB a rank"},
      {[](TrainConfig& c) { c.model = TempPath("none.pt"); }, "none.pt: no such file"},
      {[](TrainConfig& c) { c.model = "/dev/null/x.pt"; }, "no such file"},
  };
  for (const auto& [mutate, expected] : cases) {
    TrainConfig config = ValidConfig();
    mutate(config);
    EXPECT_THAT(ValidateTrainConfig(config, 3),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(expected)));
  }
  // A model file goes with every strategy (layer_separated cuts it when it
  // loads: script_split.h).
  const std::string file = TempPath("model.pt");
  std::ofstream(file) << "a file";
  TrainConfig cut = ValidConfig();
  cut.model = file;
  EXPECT_OK(ValidateTrainConfig(cut, 3));
  cut.strategy = "layer_separated";
  cut.strategy_params.clear();
  EXPECT_OK(ValidateTrainConfig(cut, 3));
  // The edges that are fine.
  TrainConfig edge = ValidConfig();
  edge.strategy = "moshpit";
  edge.strategy_params.clear();
  edge.kill_rank = 2;
  edge.kill_step = 299;
  edge.restart_killed = true;
  edge.slow_rank = 2;
  edge.slow_factor = kMaxSlowFactor;
  edge.synthetic_samples = 192;  // 64 for each of 3 ranks
  edge.eval_samples = 0;
  EXPECT_OK(ValidateTrainConfig(edge, 3));
}

// Runs train/rdmaflow_train (a data dependency) with `flags`; its exit
// status and output.
std::pair<int, std::string> RunTrain(const std::string& flags) {
  const std::string command =
      absl::StrCat("train/rdmaflow_train --progress=false ", flags, " 2>&1");
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "cannot run " + command};
  std::string output;
  char buffer[4096];
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

TEST(TrainFlagsTest, TheBinaryRefusesBadFlagsBeforeStartingAnyRank) {
  // --local is bounded (it forked that many processes before).
  for (const char* local : {"1", "-1", "257", "100000", "2147483647"}) {
    const auto [status, output] = RunTrain(absl::StrCat("--synthetic --local ", local));
    EXPECT_EQ(status, 2) << output;
    EXPECT_THAT(output, HasSubstr(absl::StrCat("--local must be in 2..256, got ", local)));
  }
  // A bad flag is refused once, by the launcher: no rank ran (each rank
  // failed on its own before, after the launcher had started them all).
  for (const char* flags : {"--batch_size 0", "--kill_rank 5", "--servers 3",
                            "--model nope", "--timeout_s nan", "--json /no/such/dir/x"}) {
    const auto [status, output] =
        RunTrain(absl::StrCat("--synthetic --local 3 ", flags));
    EXPECT_EQ(status, 2) << flags << "\n" << output;
    EXPECT_THAT(output, HasSubstr("rdmaflow_train: invalid flags: --")) << flags;
    // What a rank prints when it fails: "rdmaflow_train: rank 1: ...".
    EXPECT_THAT(output, ::testing::Not(HasSubstr("rdmaflow_train: rank"))) << flags;
    EXPECT_EQ(std::count(output.begin(), output.end(), '\n'), 1) << output;
  }
  // --help documents the bound.
  EXPECT_THAT(RunTrain("--help").second, HasSubstr("(2..256)"));
}

}  // namespace
}  // namespace rdmaflow::train
