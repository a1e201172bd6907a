// File: export_import_test.cc
// torch.export programs (.pt2), built at test time by the build's torch
// (test_models.py), read without Python: the same graphs as the TorchScript
// importer gives for the same models, the same logits as the same model
// traced, and refusals that say what is wrong with a broken file.
#include "graph_analyzer/torch/export_import.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "graph_analyzer/analyzed_graph.h"
#include "graph_analyzer/shape_util.h"
#include "graph_analyzer/torch/exported_program.h"
#include "graph_analyzer/torch/torchscript_import.h"
#include "gtest/gtest.h"
#include "torch/script.h"

namespace rdmaflow::graph {
namespace {

using ::rdmaflow::testing::StatusIs;
using ::testing::HasSubstr;

// The Python whose torch the build uses (RDMAFLOW_PYTHON, which the BUILD
// rule sets to @rdmaflow_torch//:python).
std::string TorchPython() {
  const char* python = std::getenv("RDMAFLOW_PYTHON");
  return python != nullptr ? python : "RDMAFLOW_PYTHON-is-unset";
}

class ExportImportTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(absl::StrCat(std::getenv("TEST_TMPDIR"), "/models"));
    const std::string command = absl::StrCat(
        TorchPython(), " graph_analyzer/torch/test_models.py ", *dir_,
        " mlp resnet18 transformer export:mlp export:resnet18 export:transformer"
        " export_dynamic:mlp export_core:resnet18"
        " forged:schema forged:op forged:weights forged:json");
    made_ = std::system(command.c_str()) == 0;
  }
  static void TearDownTestSuite() { delete dir_; }

  void SetUp() override {
    ASSERT_TRUE(made_) << TorchPython() << " graph_analyzer/torch/test_models.py failed (output above)";
  }

  static std::string Path(const std::string& name) { return absl::StrCat(*dir_, "/", name); }

  static std::string* dir_;
  static bool made_;
};

std::string* ExportImportTest::dir_ = nullptr;
bool ExportImportTest::made_ = false;

std::map<std::string, int> OpCounts(const GraphDef& g) {
  std::map<std::string, int> counts;
  for (const NodeDef& node : g.node()) {
    std::string op = node.op();
    if (op == "Opaque" || op == "Gradient") {
      auto it = node.attr().find("op");
      if (it != node.attr().end()) op = absl::StrCat(op, " ", it->second.s());
    }
    ++counts[op];
  }
  return counts;
}

int Count(const GraphDef& g, const std::string& op) {
  const std::map<std::string, int> counts = OpCounts(g);
  auto it = counts.find(op);
  return it == counts.end() ? 0 : it->second;
}

// Each model exported gives the training graph its traced TorchScript
// gives: the same ops, the same parameters with the same shapes.
TEST_F(ExportImportTest, AProgramGivesTheGraphItsTracedModuleGives) {
  const std::map<std::string, TensorSpec> inputs = {
      {"mlp", MakeSpec(DT_FLOAT32, {4, 1, 28, 28})},
      {"resnet18", MakeSpec(DT_FLOAT32, {4, 1, 28, 28})},
      {"transformer", MakeSpec(DT_INT64, {4, 16})}};
  for (const auto& [model, input] : inputs) {
    SCOPED_TRACE(model);
    ASSERT_OK_AND_ASSIGN(GraphDef exported,
                         ImportExportedProgram(Path(model + ".pt2"), {}));
    ASSERT_OK_AND_ASSIGN(GraphDef traced, ImportTorchScript(Path(model + ".pt"), {input}));
    EXPECT_EQ(OpCounts(exported), OpCounts(traced));
    ASSERT_OK_AND_ASSIGN(AnalyzedGraph e, AnalyzeGraph(exported));
    ASSERT_OK_AND_ASSIGN(AnalyzedGraph t, AnalyzeGraph(traced));
    int parameters = 0;
    for (const NodeDef& node : traced.node()) {
      if (node.op() != "Variable") continue;
      ++parameters;
      SCOPED_TRACE(node.name());
      const int found = e.Find(node.name());
      ASSERT_GE(found, 0);
      EXPECT_EQ(SpecString(e.spec(OutputId{found, 0})),
                SpecString(t.spec(OutputId{t.Find(node.name()), 0})));
      EXPECT_GE(e.Find(absl::StrCat(node.name(), "/apply")), 0);
    }
    EXPECT_GT(parameters, 0);
    const int labels = e.Find("labels");
    ASSERT_GE(labels, 0);
    EXPECT_EQ(SpecString(e.spec(OutputId{labels, 0})), "int64[4]");
  }
}

// A dynamic batch takes the size given; core ATen's convolution becomes
// the analyzer's Conv2D, its batch norm is carried.
TEST_F(ExportImportTest, DynamicSizesAndCoreAtenPrograms) {
  ASSERT_OK_AND_ASSIGN(
      GraphDef dynamic,
      ImportExportedProgram(Path("mlp_dynamic.pt2"), {MakeSpec(DT_FLOAT32, {32, 1, 28, 28})}));
  ASSERT_OK_AND_ASSIGN(AnalyzedGraph a, AnalyzeGraph(dynamic));
  EXPECT_EQ(SpecString(a.spec(OutputId{a.Find("labels"), 0})), "int64[32]");
  EXPECT_EQ(Count(dynamic, "MatMul"), 3);
  EXPECT_EQ(Count(dynamic, "Opaque"), 0);

  ASSERT_OK_AND_ASSIGN(GraphDef core, ImportExportedProgram(Path("resnet18_core.pt2"), {}));
  ASSERT_OK_AND_ASSIGN(GraphDef plain, ImportExportedProgram(Path("resnet18.pt2"), {}));
  EXPECT_EQ(Count(core, "Conv2D"), 20);
  EXPECT_EQ(Count(core, "Variable"), Count(plain, "Variable"));
  EXPECT_EQ(Count(core, "Opaque aten::_native_batch_norm_legit_functional"), 20);
  EXPECT_EQ(Count(plain, "Opaque aten::batch_norm"), 20);
}

// The interpreter with the file's weights computes what the model
// computes: the same logits as the same model traced, on the same input.
TEST_F(ExportImportTest, TheProgramRunsWithItsWeightsAsTheModelDoes) {
  for (const std::string model : {"mlp", "resnet18", "transformer"}) {
    SCOPED_TRACE(model);
    ASSERT_OK_AND_ASSIGN(ExportedProgram program, ExportedProgram::Load(Path(model + ".pt2")));
    ASSERT_OK_AND_ASSIGN(auto weights, program.Weights());
    torch::jit::Module traced = torch::jit::load(Path(model + ".pt"));
    torch::manual_seed(1);
    const at::Tensor x = model == "transformer" ? torch::randint(0, 100, {4, 16})
                                                : torch::randn({4, 1, 28, 28});
    std::vector<at::Tensor> values;
    for (const ExportedPlaceholder& ph : program.placeholders()) {
      if (ph.kind == ExportedPlaceholder::Kind::kUserInput) {
        values.push_back(x);
      } else {
        ASSERT_EQ(weights.count(ph.fqn), 1u) << ph.fqn;
        // Both runs update batch norm statistics: each its own copy.
        values.push_back(weights.at(ph.fqn).clone());
      }
    }
    for (const auto& p : traced.named_parameters()) {
      ASSERT_EQ(weights.count(p.name), 1u) << p.name;
      EXPECT_TRUE(weights.at(p.name).equal(p.value)) << p.name;
    }
    torch::NoGradGuard no_grad;
    ASSERT_OK_AND_ASSIGN(std::vector<c10::IValue> outputs, program.Run(values));
    const at::Tensor got = outputs.at(program.user_output()).toTensor();
    const at::Tensor want = traced.forward({x}).toTensor();
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_TRUE(got.allclose(want, 1e-4, 1e-5)) << (got - want).abs().max();
  }
}

// A core ATen program returns its new batch norm statistics as outputs
// (buffer mutations): each names its buffer, and one step moves them.
TEST_F(ExportImportTest, ACoreAtenProgramReturnsItsBufferUpdates) {
  ASSERT_OK_AND_ASSIGN(ExportedProgram program, ExportedProgram::Load(Path("resnet18_core.pt2")));
  ASSERT_OK_AND_ASSIGN(auto weights, program.Weights());
  // 20 batch norms: running mean, running variance, batch counter each.
  ASSERT_EQ(program.buffer_updates().size(), 60u);
  std::vector<at::Tensor> values;
  torch::manual_seed(2);
  for (const ExportedPlaceholder& ph : program.placeholders()) {
    values.push_back(ph.kind == ExportedPlaceholder::Kind::kUserInput
                         ? torch::randn({4, 1, 28, 28}) + 3.0
                         : weights.at(ph.fqn).clone());
  }
  torch::NoGradGuard no_grad;
  ASSERT_OK_AND_ASSIGN(std::vector<c10::IValue> outputs, program.Run(values));
  int moved = 0;
  for (const auto& [index, buffer] : program.buffer_updates()) {
    SCOPED_TRACE(buffer);
    ASSERT_EQ(weights.count(buffer), 1u);
    const at::Tensor updated = outputs.at(index).toTensor();
    ASSERT_EQ(updated.sizes(), weights.at(buffer).sizes());
    moved += !updated.equal(weights.at(buffer));
  }
  EXPECT_EQ(moved, 60);  // every statistic and counter changed
}

TEST_F(ExportImportTest, BrokenFilesAndInputsAreRefusedWithTheReason) {
  EXPECT_THAT(ImportExportedProgram(Path("none.pt2"), {}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no such file")));
  const std::string junk = Path("junk.pt2");
  std::ofstream(junk) << "not a zip archive";
  EXPECT_THAT(ImportExportedProgram(junk, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cannot be read")));
  EXPECT_THAT(ImportExportedProgram(Path("mlp.pt"), {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("has no models/model.json")));
  EXPECT_THAT(ImportExportedProgram(Path("forged_schema.pt2"), {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("written with export schema 99.0")));
  EXPECT_THAT(ImportExportedProgram(Path("forged_op.pt2"), {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("has no op torch.ops.aten.no_such_op.default")));
  EXPECT_THAT(ImportExportedProgram(Path("forged_json.pt2"), {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is no JSON object")));
  ASSERT_OK_AND_ASSIGN(ExportedProgram forged, ExportedProgram::Load(Path("forged_weights.pt2")));
  EXPECT_THAT(forged.Weights(), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("bytes; its sizes need")));

  EXPECT_THAT(ImportExportedProgram(Path("mlp.pt2"), {MakeSpec(DT_FLOAT32, {4, 1, 28, 28}),
                                                      MakeSpec(DT_FLOAT32, {4})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("forward() takes 1 input(s); sizes were given for 2")));
  EXPECT_THAT(ImportExportedProgram(Path("mlp.pt2"), {MakeSpec(DT_FLOAT32, {4, 3, 28, 28})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("failed on the given input sizes")));
  EXPECT_THAT(ImportExportedProgram(Path("mlp.pt2"), {MakeSpec(DT_FLOAT32, {4, 0, 28, 28})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("every dimension must be positive")));
}

}  // namespace
}  // namespace rdmaflow::graph
