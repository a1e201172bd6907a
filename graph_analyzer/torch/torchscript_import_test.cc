// File: torchscript_import_test.cc
// The test models are built at test time by the build's torch
// (test_models.py): an MLP, a ResNet-18-like CNN and a small transformer.
#include "graph_analyzer/torch/torchscript_import.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "graph_analyzer/analyzed_graph.h"
#include "graph_analyzer/shape_util.h"
#include "gtest/gtest.h"

namespace rdmaflow::graph {
namespace {

// The Python whose torch the build uses (RDMAFLOW_PYTHON, which the BUILD
// rule sets to @rdmaflow_torch//:python).
std::string TorchPython() {
  const char* python = std::getenv("RDMAFLOW_PYTHON");
  return python != nullptr ? python : "RDMAFLOW_PYTHON-is-unset";
}

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int kBatch = 8;

class TorchScriptImportTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(absl::StrCat(std::getenv("TEST_TMPDIR"), "/models"));
    const std::string command =
        absl::StrCat(TorchPython(), " graph_analyzer/torch/test_models.py ", *dir_,
                     " mlp resnet18 transformer control_flow tied_tuple loop data_loop"
                     " scripted_resnet18 scripted_encoder");
    made_ = std::system(command.c_str()) == 0;
  }
  static void TearDownTestSuite() { delete dir_; }

  void SetUp() override {
    ASSERT_TRUE(made_) << TorchPython() << " graph_analyzer/torch/test_models.py failed (output above)";
  }

  static std::string Path(const std::string& model) {
    return absl::StrCat(*dir_, "/", model, ".pt");
  }

  // The model's manifest (test_models.py): sample shape, dtype, parameters.
  static google::protobuf::Struct Manifest(const std::string& model) {
    std::ifstream in(absl::StrCat(*dir_, "/", model, ".json"));
    std::stringstream text;
    text << in.rdbuf();
    google::protobuf::Struct manifest;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(text.str(), &manifest).ok());
    return manifest;
  }

  static std::vector<int64_t> Shape(const google::protobuf::Value& list) {
    std::vector<int64_t> shape;
    for (const auto& d : list.list_value().values()) {
      shape.push_back(static_cast<int64_t>(d.number_value()));
    }
    return shape;
  }

  static TensorSpec Input(const std::string& model) {
    const google::protobuf::Struct m = Manifest(model);
    std::vector<int64_t> shape = {kBatch};
    for (int64_t d : Shape(m.fields().at("sample"))) shape.push_back(d);
    return MakeSpec(m.fields().at("dtype").string_value() == "int64" ? DT_INT64 : DT_FLOAT32,
                    shape);
  }

  static std::string* dir_;
  static bool made_;
};

std::string* TorchScriptImportTest::dir_ = nullptr;
bool TorchScriptImportTest::made_ = false;

int Count(const GraphDef& g, const std::string& op, const std::string& opaque = "") {
  int n = 0;
  for (const NodeDef& node : g.node()) {
    if (node.op() != op) continue;
    if (!opaque.empty() && node.attr().at("op").s() != opaque) continue;
    ++n;
  }
  return n;
}

TEST_F(TorchScriptImportTest, EveryParameterActivationAndGradientOfEachModel) {
  for (const std::string model : {"mlp", "resnet18", "transformer"}) {
    SCOPED_TRACE(model);
    ASSERT_OK_AND_ASSIGN(GraphDef g, ImportTorchScript(Path(model), {Input(model)}));
    ASSERT_OK_AND_ASSIGN(AnalyzedGraph a, AnalyzeGraph(g));
    const google::protobuf::Struct m = Manifest(model);
    const auto& parameters = m.fields().at("parameters").struct_value().fields();
    ASSERT_FALSE(parameters.empty());
    EXPECT_EQ(Count(g, "Variable"), static_cast<int>(parameters.size()));
    EXPECT_EQ(Count(g, "ApplyGradient"), static_cast<int>(parameters.size()));
    for (const auto& [name, shape] : parameters) {
      SCOPED_TRACE(name);
      const TensorSpec expected = MakeSpec(DT_FLOAT32, Shape(shape));
      const int param = a.Find(name);
      ASSERT_GE(param, 0);
      EXPECT_EQ(SpecString(a.spec(OutputId{param, 0})), SpecString(expected));
      const int grad = a.Find(absl::StrCat(name, "/grad"));
      ASSERT_GE(grad, 0);
      EXPECT_EQ(SpecString(a.spec(OutputId{grad, 0})), SpecString(expected));
    }
    // Buffers (batch norm statistics) are read, never trained.
    const auto& buffers = m.fields().at("buffers").struct_value().fields();
    for (const auto& [name, shape] : buffers) {
      if (name.find("num_batches_tracked") != std::string::npos) continue;
      SCOPED_TRACE(name);
      const int b = a.Find(name);
      ASSERT_GE(b, 0);
      EXPECT_EQ(g.node(b).op(), "Const");
    }
    // The loss is on [N, 10] logits.
    const int labels = a.Find("labels");
    ASSERT_GE(labels, 0);
    EXPECT_EQ(SpecString(a.spec(OutputId{labels, 0})), "int64[8]");
  }
}

TEST_F(TorchScriptImportTest, KnownOpsBecomeTheAnalyzersAndTheRestAreCarried) {
  ASSERT_OK_AND_ASSIGN(GraphDef mlp, ImportTorchScript(Path("mlp"), {Input("mlp")}));
  EXPECT_EQ(Count(mlp, "MatMul"), 3);
  EXPECT_EQ(Count(mlp, "Flatten"), 1);
  EXPECT_EQ(Count(mlp, "Relu"), 2);
  EXPECT_EQ(Count(mlp, "Opaque"), 0);

  ASSERT_OK_AND_ASSIGN(GraphDef resnet,
                       ImportTorchScript(Path("resnet18"), {Input("resnet18")}));
  // 1 stem + 16 block convolutions + 3 strided shortcuts.
  EXPECT_EQ(Count(resnet, "Conv2D"), 20);
  EXPECT_EQ(Count(resnet, "Opaque", "aten::batch_norm"), 20);
  EXPECT_EQ(Count(resnet, "Opaque", "aten::adaptive_avg_pool2d"), 1);
  // 8 residuals and the classifier's bias; the batch norms' counters
  // (in-place adds on buffers) are left out.
  EXPECT_EQ(Count(resnet, "Add"), 9);

  ASSERT_OK_AND_ASSIGN(GraphDef transformer,
                       ImportTorchScript(Path("transformer"), {Input("transformer")}));
  EXPECT_EQ(Count(transformer, "Opaque", "aten::layer_norm"), 5);
  EXPECT_EQ(Count(transformer, "Opaque", "aten::embedding"), 1);
  EXPECT_EQ(Count(transformer, "Softmax"), 2);
  EXPECT_EQ(Count(transformer, "ReduceMean"), 1);  // the mean over positions
}

TEST_F(TorchScriptImportTest, TuplesKeepTheirTensorsAndTiedWeightsAreOneParameter) {
  ASSERT_OK_AND_ASSIGN(GraphDef g,
                       ImportTorchScript(Path("tied_tuple"), {MakeSpec(DT_FLOAT32, {4, 8})}));
  ASSERT_OK_AND_ASSIGN(AnalyzedGraph a, AnalyzeGraph(g));
  // features.fc's output comes out of a tuple: its gradient still flows.
  EXPECT_GE(a.Find("features.fc.weight/apply"), 0);
  EXPECT_GE(a.Find("features.fc.bias/apply"), 0);
  // head.weight and out.weight are one tensor: one parameter, whose
  // gradient sums both uses.
  EXPECT_GE(a.Find("head.weight"), 0);
  EXPECT_LT(a.Find("out.weight"), 0);
  EXPECT_EQ(Count(g, "Variable"), 5);  // features.fc.{weight,bias}, head.{weight,bias}, out.bias
}

TEST_F(TorchScriptImportTest, BadFilesInputsAndModelsAreRefusedWithTheReason) {
  EXPECT_THAT(ImportTorchScript(absl::StrCat(*dir_, "/none.pt"), {Input("mlp")}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no such file")));
  const std::string junk = absl::StrCat(*dir_, "/junk.pt");
  std::ofstream(junk) << "not a zip archive";
  EXPECT_THAT(ImportTorchScript(junk, {Input("mlp")}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cannot be read")));
  EXPECT_THAT(ImportTorchScript(Path("mlp"), {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("forward() takes 1 input(s); sizes were given for 0")));
  EXPECT_THAT(ImportTorchScript(Path("mlp"), {MakeSpec(DT_FLOAT32, {8, 3, 28, 28})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("failed on the given input sizes")));
  EXPECT_THAT(ImportTorchScript(Path("mlp"), {MakeSpec(DT_FLOAT32, {8, 0, 28, 28})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("every dimension must be positive")));
  EXPECT_THAT(ImportTorchScript(Path("control_flow"), {MakeSpec(DT_FLOAT32, {2, 4})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("branches on the values of a tensor")));
  EXPECT_THAT(ImportTorchScript(Path("data_loop"), {MakeSpec(DT_FLOAT32, {2, 4})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("loops while a condition on the values of a tensor")));
}

// A loop over a size is unrolled: one pass per row of the input, each its
// own activations, one parameter whose gradient sums every pass.
TEST_F(TorchScriptImportTest, ScriptedLoopsOverSizesAreUnrolled) {
  for (const int64_t rows : {1, 3}) {
    SCOPED_TRACE(rows);
    ASSERT_OK_AND_ASSIGN(GraphDef g,
                         ImportTorchScript(Path("loop"), {MakeSpec(DT_FLOAT32, {rows, 4})}));
    ASSERT_OK_AND_ASSIGN(AnalyzedGraph a, AnalyzeGraph(g));
    EXPECT_EQ(Count(g, "MatMul"), rows);
    EXPECT_EQ(Count(g, "Variable"), 2);  // fc.weight, fc.bias
    EXPECT_GE(a.Find("fc.weight/apply"), 0);
  }
}

// A scripted module whose ifs depend only on attributes and shapes is
// planned for the given input: the branch taken, as the traced module.
TEST_F(TorchScriptImportTest, ScriptedBranchesOnAttributesAndShapesAreDecided) {
  ASSERT_OK_AND_ASSIGN(GraphDef traced,
                       ImportTorchScript(Path("resnet18"), {Input("resnet18")}));
  ASSERT_OK_AND_ASSIGN(GraphDef scripted,
                       ImportTorchScript(Path("scripted_resnet18"), {Input("resnet18")}));
  for (const char* op : {"Variable", "ApplyGradient", "Conv2D", "Add", "Relu", "Const"}) {
    SCOPED_TRACE(op);
    EXPECT_EQ(Count(scripted, op), Count(traced, op));
  }
  // Training mode: every batch norm normalizes with batch statistics, as
  // one aten::batch_norm each (the eval branch is not taken); the
  // counters' in-place adds are left out.
  EXPECT_EQ(Count(scripted, "Opaque", "aten::batch_norm"), 20);
  EXPECT_EQ(Count(scripted, "Opaque", "aten::add_"), 0);

  const TensorSpec tokens = MakeSpec(DT_INT64, {kBatch, 16});
  ASSERT_OK_AND_ASSIGN(GraphDef encoder,
                       ImportTorchScript(Path("scripted_encoder"), {tokens}));
  ASSERT_OK_AND_ASSIGN(AnalyzedGraph a, AnalyzeGraph(encoder));
  // Not the inference fast path (a training step has gradients on): the
  // layer's attention, feed-forward and norms, each parameter trained.
  EXPECT_EQ(Count(encoder, "Opaque", "aten::_transformer_encoder_layer_fwd"), 0);
  EXPECT_EQ(Count(encoder, "Opaque", "aten::layer_norm"), 2);
  for (const char* name : {"embedding.weight", "layer.self_attn.in_proj_weight",
                           "layer.self_attn.out_proj.weight", "layer.linear1.weight",
                           "layer.linear2.weight", "layer.norm1.weight", "head.weight"}) {
    SCOPED_TRACE(name);
    EXPECT_GE(a.Find(absl::StrCat(name, "/apply")), 0);
  }
  // The head's branch on the rank took the mean over positions.
  EXPECT_EQ(Count(encoder, "ReduceMean"), 1);
  const int labels = a.Find("labels");
  ASSERT_GE(labels, 0);
  EXPECT_EQ(SpecString(a.spec(OutputId{labels, 0})), "int64[8]");
}

}  // namespace
}  // namespace rdmaflow::graph
