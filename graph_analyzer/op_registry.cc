// File: op_registry.cc
#include "graph_analyzer/op_registry.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "graph_analyzer/internal/shape_fns.h"

namespace rdmaflow::graph {
namespace {

using internal::AddNShape;
using internal::ApplyGradientShape;
using internal::BiasAddShape;
using internal::BroadcastShape;
using internal::ConcatShape;
using internal::Conv2DShape;
using internal::CrossEntropyShape;
using internal::DeclaredOutputs;
using internal::FlattenShape;
using internal::GradientShape;
using internal::MatMulShape;
using internal::NoOutputs;
using internal::OpaqueOutputs;
using internal::PoolShape;
using internal::ReduceShape;
using internal::ReshapeShape;
using internal::SplitShape;
using internal::UnaryShape;

// Sorted by name (FindOp binary-searches).
constexpr OpDef kOps[] = {
    {"Add", 2, 2, BroadcastShape},
    {"AddN", 1, kVariadic, AddNShape},
    {"ApplyGradient", 2, kVariadic, ApplyGradientShape},
    {"AvgPool", 1, 1, PoolShape},
    {"BiasAdd", 2, 2, BiasAddShape},
    {"Concat", 1, kVariadic, ConcatShape},
    {"Const", 0, 0, DeclaredOutputs},
    {"Conv2D", 2, 2, Conv2DShape},
    {"Flatten", 1, 1, FlattenShape},
    {"Gradient", 1, kVariadic, GradientShape},
    {"Identity", 1, 1, UnaryShape},
    {"MatMul", 2, 2, MatMulShape},
    {"MaxPool", 1, 1, PoolShape},
    {"Mul", 2, 2, BroadcastShape},
    {"Opaque", 0, kVariadic, OpaqueOutputs},
    {"Parameter", 0, 0, DeclaredOutputs},
    {"Placeholder", 0, 0, DeclaredOutputs},
    {"Recv", 0, 0, DeclaredOutputs},
    {"ReduceMean", 1, 1, ReduceShape},
    {"ReduceSum", 1, 1, ReduceShape},
    {"Relu", 1, 1, UnaryShape},
    {"Reshape", 1, 1, ReshapeShape},
    {"Send", 1, 1, NoOutputs},
    {"Sigmoid", 1, 1, UnaryShape},
    {"Softmax", 1, 1, UnaryShape},
    {"SoftmaxCrossEntropy", 2, 2, CrossEntropyShape},
    {"Split", 1, 1, SplitShape},
    {"Sub", 2, 2, BroadcastShape},
    {"Tanh", 1, 1, UnaryShape},
    {"Variable", 0, 0, DeclaredOutputs},
};

const char* AttrKind(const AttrValue& value) {
  if (value.has_i()) return "int (i)";
  if (value.has_f()) return "float (f)";
  if (value.has_s()) return "string (s)";
  if (value.ints_size() > 0) return "int list (ints)";
  if (value.has_b()) return "bool (b)";
  if (value.has_type()) return "dtype (type)";
  return "empty";
}

absl::Status WrongKind(absl::string_view name, const char* want,
                       const AttrValue& value) {
  return absl::InvalidArgumentError(absl::StrCat("attribute '", name,
                                                 "' must be ", want, ", got ",
                                                 AttrKind(value)));
}

absl::Status Missing(absl::string_view name, const char* want) {
  return absl::InvalidArgumentError(
      absl::StrCat("missing required attribute '", name, "' (", want, ")"));
}

}  // namespace

const AttrValue* ShapeContext::Find(absl::string_view name) const {
  auto it = node_.attr().find(std::string(name));
  return it == node_.attr().end() ? nullptr : &it->second;
}

bool ShapeContext::HasAttr(absl::string_view name) const {
  return Find(name) != nullptr;
}

absl::StatusOr<int64_t> ShapeContext::GetInt(absl::string_view name) const {
  const AttrValue* value = Find(name);
  if (value == nullptr) return Missing(name, "int (i)");
  if (!value->has_i()) return WrongKind(name, "int (i)", *value);
  return value->i();
}

absl::StatusOr<std::vector<int64_t>> ShapeContext::GetInts(
    absl::string_view name) const {
  const AttrValue* value = Find(name);
  if (value == nullptr) return Missing(name, "int list (ints)");
  // An empty list is a valid value, and looks like an empty AttrValue.
  if (value->has_i() || value->has_f() || value->has_s() || value->has_b() ||
      value->has_type()) {
    return WrongKind(name, "int list (ints)", *value);
  }
  return std::vector<int64_t>(value->ints().begin(), value->ints().end());
}

absl::StatusOr<std::string> ShapeContext::GetString(
    absl::string_view name) const {
  const AttrValue* value = Find(name);
  if (value == nullptr) return Missing(name, "string (s)");
  if (!value->has_s()) return WrongKind(name, "string (s)", *value);
  return value->s();
}

absl::StatusOr<int64_t> ShapeContext::GetIntOr(absl::string_view name,
                                               int64_t fallback) const {
  return HasAttr(name) ? GetInt(name) : fallback;
}

absl::StatusOr<std::vector<int64_t>> ShapeContext::GetIntsOr(
    absl::string_view name, std::vector<int64_t> fallback) const {
  if (!HasAttr(name)) return fallback;
  return GetInts(name);
}

absl::StatusOr<std::string> ShapeContext::GetStringOr(
    absl::string_view name, std::string fallback) const {
  if (!HasAttr(name)) return fallback;
  return GetString(name);
}

absl::StatusOr<bool> ShapeContext::GetBoolOr(absl::string_view name,
                                             bool fallback) const {
  const AttrValue* value = Find(name);
  if (value == nullptr) return fallback;
  if (!value->has_b()) return WrongKind(name, "bool (b)", *value);
  return value->b();
}

const OpDef* FindOp(absl::string_view name) {
  auto it = std::lower_bound(
      std::begin(kOps), std::end(kOps), name,
      [](const OpDef& op, absl::string_view n) { return op.name < n; });
  if (it == std::end(kOps) || it->name != name) return nullptr;
  return it;
}

std::vector<absl::string_view> KnownOps() {
  std::vector<absl::string_view> names;
  for (const OpDef& op : kOps) names.push_back(op.name);
  return names;
}

}  // namespace rdmaflow::graph
