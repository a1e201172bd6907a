// File: exported_program.cc
#include "graph_analyzer/torch/exported_program.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <system_error>
#include <utility>

#include "ATen/ATen.h"
#include "ATen/ScalarOps.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "caffe2/serialize/inline_container.h"
#include "common/status_macros.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace rdmaflow::graph {
namespace {

using google::protobuf::ListValue;
using google::protobuf::Struct;
using google::protobuf::Value;
using Kind = ExportedArgument::Kind;
using caffe2::serialize::PyTorchStreamReader;

// The export schema this reader knows (torch/_export/serde/schema.py):
// minor versions only add fields.
constexpr int64_t kSchemaMajor = 8;
// A program's JSON and a weights config are text: more than this is no
// model anyone exports.
constexpr uint64_t kMaxJsonBytes = uint64_t{512} << 20;
// JSON numbers are doubles: integers beyond 2^53 are not exact.
constexpr double kMaxExactInt = 9007199254740992.0;

constexpr char kProgramRecord[] = "models/model.json";
constexpr char kWeightsConfig[] = "data/weights/model_weights_config.json";
constexpr char kWeightsDir[] = "data/weights/";
constexpr char kConstantsConfig[] = "data/constants/model_constants_config.json";
constexpr char kConstantsDir[] = "data/constants/";

// Errors while reading name the file and the place in it.
class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  absl::Status Invalid(const std::string& where, const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("torch.export program '", path_, "': ", where, ": ", what));
  }

  const Value* Get(const Struct& s, const char* key) const {
    auto it = s.fields().find(key);
    if (it == s.fields().end() || it->second.has_null_value()) return nullptr;
    return &it->second;
  }

  absl::StatusOr<const Struct*> Obj(const Value* v, const std::string& where) const {
    if (v == nullptr || !v->has_struct_value()) return Invalid(where, "not an object");
    return &v->struct_value();
  }

  absl::StatusOr<const Struct*> Field(const Struct& s, const char* key,
                                      const std::string& where) const {
    return Obj(Get(s, key), absl::StrCat(where, ".", key));
  }

  absl::StatusOr<const ListValue*> List(const Value* v, const std::string& where) const {
    if (v == nullptr || !v->has_list_value()) return Invalid(where, "not a list");
    return &v->list_value();
  }

  absl::StatusOr<int64_t> Int(const Value* v, const std::string& where) const {
    if (v == nullptr || !v->has_number_value()) return Invalid(where, "not a number");
    const double x = v->number_value();
    if (!(std::fabs(x) <= kMaxExactInt) || x != std::floor(x)) {
      return Invalid(where, absl::StrCat(x, " is not an integer of at most 2^53"));
    }
    return static_cast<int64_t>(x);
  }

  absl::StatusOr<double> Float(const Value* v, const std::string& where) const {
    if (v != nullptr && v->has_number_value()) return v->number_value();
    if (v != nullptr && v->has_string_value()) {
      // json.dumps(allow_nan=False) writes these as strings.
      const std::string& s = v->string_value();
      if (s == "Infinity") return std::numeric_limits<double>::infinity();
      if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
      if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
    }
    return Invalid(where, "not a number");
  }

  absl::StatusOr<std::string> Str(const Value* v, const std::string& where) const {
    if (v == nullptr || !v->has_string_value()) return Invalid(where, "not a string");
    return v->string_value();
  }

  // A union: an object with one field set, {"as_xxx": value}.
  absl::StatusOr<std::pair<std::string, const Value*>> Union(const Value* v,
                                                             const std::string& where) const {
    ASSIGN_OR_RETURN(const Struct* s, Obj(v, where));
    std::pair<std::string, const Value*> found{"", nullptr};
    for (const auto& [key, value] : s->fields()) {
      if (value.has_null_value()) continue;
      if (found.second != nullptr) {
        return Invalid(where, absl::StrCat("sets both ", found.first, " and ", key));
      }
      found = {key, &value};
    }
    if (found.second == nullptr) return Invalid(where, "sets nothing");
    return found;
  }

  // {"name": "x"} (a TensorArgument).
  absl::StatusOr<std::string> TensorName(const Value* v, const std::string& where) const {
    ASSIGN_OR_RETURN(const Struct* s, Obj(v, where));
    return Str(Get(*s, "name"), absl::StrCat(where, ".name"));
  }

  // A SymInt: {"as_int": n} or {"as_expr": {..., "hint": {"as_int": n}}}.
  absl::StatusOr<int64_t> SizeHint(const Value* v, const std::string& where) const {
    ASSIGN_OR_RETURN(auto u, Union(v, where));
    if (u.first == "as_int") return Int(u.second, where);
    if (u.first == "as_expr") {
      ASSIGN_OR_RETURN(const Struct* e, Obj(u.second, where));
      const Value* hint = Get(*e, "hint");
      if (hint == nullptr) {
        return Invalid(where, "a dynamic size without an example value (hint)");
      }
      return SizeHint(hint, absl::StrCat(where, ".hint"));
    }
    return Invalid(where, absl::StrCat("a size written as ", u.first));
  }

  absl::StatusOr<std::vector<int64_t>> Sizes(const Value* v, const std::string& where) const {
    ASSIGN_OR_RETURN(const ListValue* list, List(v, where));
    std::vector<int64_t> sizes;
    for (int i = 0; i < list->values_size(); ++i) {
      ASSIGN_OR_RETURN(int64_t d, SizeHint(&list->values(i), absl::StrCat(where, "[", i, "]")));
      if (d < 0) return Invalid(where, absl::StrCat("size ", d, " is negative"));
      sizes.push_back(d);
    }
    return sizes;
  }

  // The export schema's ScalarType numbering (not c10's).
  absl::StatusOr<c10::ScalarType> Dtype(const Value* v, const std::string& where) const {
    ASSIGN_OR_RETURN(int64_t n, Int(v, where));
    switch (n) {
      case 1: return c10::ScalarType::Byte;
      case 2: return c10::ScalarType::Char;
      case 3: return c10::ScalarType::Short;
      case 4: return c10::ScalarType::Int;
      case 5: return c10::ScalarType::Long;
      case 6: return c10::ScalarType::Half;
      case 7: return c10::ScalarType::Float;
      case 8: return c10::ScalarType::Double;
      case 12: return c10::ScalarType::Bool;
      case 13: return c10::ScalarType::BFloat16;
      default:
        return Invalid(where, absl::StrCat("dtype ", n, " (complex, float8, ...) is not supported"));
    }
  }

  absl::StatusOr<ExportedArgument> Argument(const Value* v, const std::string& where) const {
    ASSIGN_OR_RETURN(auto u, Union(v, where));
    const auto& [key, value] = u;
    ExportedArgument a;
    if (key == "as_none") {
      a.kind = Kind::kNone;
    } else if (key == "as_tensor") {
      a.kind = Kind::kTensor;
      ASSIGN_OR_RETURN(std::string name, TensorName(value, where));
      a.names.push_back(std::move(name));
    } else if (key == "as_tensors") {
      a.kind = Kind::kTensors;
      ASSIGN_OR_RETURN(const ListValue* list, List(value, where));
      for (const Value& t : list->values()) {
        ASSIGN_OR_RETURN(std::string name, TensorName(&t, where));
        a.names.push_back(std::move(name));
      }
    } else if (key == "as_optional_tensor") {
      ASSIGN_OR_RETURN(auto inner, Union(value, where));
      if (inner.first == "as_none") {
        a.kind = Kind::kNone;
      } else {
        a.kind = Kind::kTensor;
        ASSIGN_OR_RETURN(std::string name, TensorName(inner.second, where));
        a.names.push_back(std::move(name));
      }
    } else if (key == "as_optional_tensors") {
      a.kind = Kind::kOptionalTensors;
      ASSIGN_OR_RETURN(const ListValue* list, List(value, where));
      for (const Value& t : list->values()) {
        ASSIGN_OR_RETURN(auto inner, Union(&t, where));
        std::string name;
        if (inner.first != "as_none") {
          ASSIGN_OR_RETURN(name, TensorName(inner.second, where));
        }
        a.names.push_back(std::move(name));
      }
    } else if (key == "as_int" || key == "as_bool") {
      a.kind = key == "as_int" ? Kind::kInt : Kind::kBool;
      if (key == "as_bool") {
        if (!value->has_bool_value()) return Invalid(where, "not a bool");
        a.ints.push_back(value->bool_value());
      } else {
        ASSIGN_OR_RETURN(int64_t n, Int(value, where));
        a.ints.push_back(n);
      }
    } else if (key == "as_ints" || key == "as_bools") {
      a.kind = key == "as_ints" ? Kind::kInts : Kind::kBools;
      ASSIGN_OR_RETURN(const ListValue* list, List(value, where));
      for (const Value& x : list->values()) {
        if (key == "as_bools") {
          if (!x.has_bool_value()) return Invalid(where, "not a bool");
          a.ints.push_back(x.bool_value());
        } else {
          ASSIGN_OR_RETURN(int64_t n, Int(&x, where));
          a.ints.push_back(n);
        }
      }
    } else if (key == "as_float") {
      a.kind = Kind::kFloat;
      ASSIGN_OR_RETURN(double x, Float(value, where));
      a.floats.push_back(x);
    } else if (key == "as_floats") {
      a.kind = Kind::kFloats;
      ASSIGN_OR_RETURN(const ListValue* list, List(value, where));
      for (const Value& x : list->values()) {
        ASSIGN_OR_RETURN(double f, Float(&x, where));
        a.floats.push_back(f);
      }
    } else if (key == "as_string") {
      a.kind = Kind::kString;
      ASSIGN_OR_RETURN(a.text, Str(value, where));
    } else if (key == "as_sym_int" || key == "as_sym_ints") {
      a.kind = key == "as_sym_int" ? Kind::kSymInt : Kind::kSymInts;
      std::vector<const Value*> elements;
      if (a.kind == Kind::kSymInt) {
        elements.push_back(value);
      } else {
        ASSIGN_OR_RETURN(const ListValue* list, List(value, where));
        for (const Value& x : list->values()) elements.push_back(&x);
      }
      for (const Value* x : elements) {
        ASSIGN_OR_RETURN(auto inner, Union(x, where));
        if (inner.first == "as_name") {
          ASSIGN_OR_RETURN(std::string name, Str(inner.second, where));
          a.names.push_back(std::move(name));
          a.ints.push_back(0);
        } else if (inner.first == "as_int") {
          ASSIGN_OR_RETURN(int64_t n, Int(inner.second, where));
          a.names.emplace_back();
          a.ints.push_back(n);
        } else {
          return Invalid(where, absl::StrCat("a symbolic int written as ", inner.first));
        }
      }
    } else if (key == "as_scalar_type") {
      a.kind = Kind::kScalarType;
      ASSIGN_OR_RETURN(a.scalar_type, Dtype(value, where));
    } else if (key == "as_memory_format") {
      a.kind = Kind::kMemoryFormat;
      ASSIGN_OR_RETURN(int64_t n, Int(value, where));
      switch (n) {
        case 1: a.memory_format = c10::MemoryFormat::Contiguous; break;
        case 2: a.memory_format = c10::MemoryFormat::ChannelsLast; break;
        case 3: a.memory_format = c10::MemoryFormat::ChannelsLast3d; break;
        case 4: a.memory_format = c10::MemoryFormat::Preserve; break;
        default: return Invalid(where, absl::StrCat("memory format ", n, " is not supported"));
      }
    } else if (key == "as_layout") {
      a.kind = Kind::kLayout;
      ASSIGN_OR_RETURN(int64_t n, Int(value, where));
      if (n != 7) return Invalid(where, "only strided tensors are supported");
    } else if (key == "as_device") {
      a.kind = Kind::kDevice;
    } else {
      return Invalid(where, absl::StrCat("an argument written as ", key,
                                         " is not supported by this reader"));
    }
    return a;
  }

 private:
  std::string path_;
};

absl::StatusOr<std::unique_ptr<PyTorchStreamReader>> OpenArchive(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    return absl::NotFoundError(absl::StrCat(
        "torch.export program '", path, "': no such file (save one with torch.export.save)"));
  }
  std::string message;
  try {
    return std::make_unique<PyTorchStreamReader>(path);
  } catch (const c10::Error& e) {
    message = e.what_without_backtrace();
  } catch (const std::exception& e) {
    message = e.what();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "torch.export program '", path, "' cannot be read (is it a .pt2 file saved with "
      "torch.export.save?): ", message));
}

// The record `name` as text; kInvalidArgument when missing or too large.
absl::StatusOr<std::string> ReadText(PyTorchStreamReader& archive, const std::string& path,
                                     const std::string& name) {
  try {
    if (!archive.hasRecord(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "torch.export program '", path, "' has no ", name,
          " (is it a .pt2 file saved with torch.export.save?)"));
    }
    const size_t size = archive.getRecordSize(name);
    if (size > kMaxJsonBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "torch.export program '", path, "': ", name, " is ", size,
          " bytes, more than the ", kMaxJsonBytes, " this reader takes"));
    }
    std::string text(size, '\0');
    archive.getRecord(name, text.data(), size);
    return text;
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "torch.export program '", path, "': reading ", name, ": ",
        e.what_without_backtrace()));
  }
}

absl::StatusOr<Struct> ParseJson(const std::string& text, const std::string& path,
                                 const std::string& name) {
  Struct out;
  const auto status = google::protobuf::util::JsonStringToMessage(text, &out);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("torch.export program '", path, "': ", name,
                                                   " is no JSON object: ", status.ToString()));
  }
  return out;
}

// Reads one payload (a weight or a constant) into a tensor of its own.
absl::StatusOr<at::Tensor> ReadPayload(PyTorchStreamReader& archive, const Reader& r,
                                       const std::string& record, const Struct& meta,
                                       const std::string& where) {
  ASSIGN_OR_RETURN(c10::ScalarType dtype, r.Dtype(r.Get(meta, "dtype"), where + ".dtype"));
  ASSIGN_OR_RETURN(std::vector<int64_t> sizes, r.Sizes(r.Get(meta, "sizes"), where + ".sizes"));
  ASSIGN_OR_RETURN(std::vector<int64_t> strides,
                   r.Sizes(r.Get(meta, "strides"), where + ".strides"));
  ASSIGN_OR_RETURN(int64_t offset,
                   r.SizeHint(r.Get(meta, "storage_offset"), where + ".storage_offset"));
  if (strides.size() != sizes.size() || offset < 0) {
    return r.Invalid(where, "its strides or offset do not fit its sizes");
  }
  // The elements the view reaches: offset + sum((size - 1) * stride) + 1,
  // with no overflow.
  bool empty = false;
  int64_t extent = offset;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) empty = true;
    int64_t step = 0;
    if (sizes[i] > 0 && (__builtin_mul_overflow(sizes[i] - 1, strides[i], &step) ||
                         __builtin_add_overflow(extent, step, &extent))) {
      return r.Invalid(where, "its sizes and strides overflow");
    }
  }
  const int64_t item = static_cast<int64_t>(c10::elementSize(dtype));
  int64_t need = 0;
  if (!empty && (__builtin_add_overflow(extent, 1, &extent) ||
                 __builtin_mul_overflow(extent, item, &need))) {
    return r.Invalid(where, "its sizes and strides overflow");
  }
  try {
    if (!archive.hasRecord(record)) return r.Invalid(where, absl::StrCat("no record ", record));
    const size_t have = archive.getRecordSize(record);
    if (static_cast<uint64_t>(need) > have) {
      return r.Invalid(where, absl::StrCat(record, " holds ", have, " bytes; its sizes need ",
                                           need));
    }
    at::Tensor storage = at::empty({static_cast<int64_t>(have) / item}, at::dtype(dtype));
    if (have >= static_cast<size_t>(item)) {
      archive.getRecord(record, storage.data_ptr(), storage.numel() * item);
    }
    if (empty) return at::empty(sizes, at::dtype(dtype));
    return storage.as_strided(sizes, strides, offset).clone(at::MemoryFormat::Contiguous);
  } catch (const c10::Error& e) {
    return r.Invalid(where, e.what_without_backtrace());
  }
}

// Reads {"config": {FQN: {path_name, use_pickle, tensor_meta}}} and the
// payloads it names into `out`.
absl::Status ReadPayloads(PyTorchStreamReader& archive, const std::string& path,
                          const std::string& config_record, const std::string& dir,
                          std::map<std::string, at::Tensor>& out) {
  const Reader r(path);
  ASSIGN_OR_RETURN(std::string text, ReadText(archive, path, config_record));
  ASSIGN_OR_RETURN(Struct config, ParseJson(text, path, config_record));
  ASSIGN_OR_RETURN(const Struct* entries, r.Field(config, "config", config_record));
  for (const auto& [fqn, entry] : entries->fields()) {
    const std::string where = absl::StrCat(config_record, " '", fqn, "'");
    ASSIGN_OR_RETURN(const Struct* e, r.Obj(&entry, where));
    const Value* pickled = r.Get(*e, "use_pickle");
    if (pickled != nullptr && pickled->bool_value()) {
      return r.Invalid(where, "a pickled payload (a tensor subclass or an object), which "
                              "this reader does not load");
    }
    ASSIGN_OR_RETURN(std::string file, r.Str(r.Get(*e, "path_name"), where + ".path_name"));
    if (file.empty() || absl::StrContains(file, "..")) {
      return r.Invalid(where, absl::StrCat("payload name '", file, "'"));
    }
    ASSIGN_OR_RETURN(const Struct* meta, r.Field(*e, "tensor_meta", where));
    ASSIGN_OR_RETURN(out[fqn], ReadPayload(archive, r, dir + file, *meta, where));
  }
  return absl::OkStatus();
}

// Arithmetic on sizes, as torch.export writes it for dynamic shapes.
absl::StatusOr<int64_t> SizeArithmetic(const std::string& kind, const std::vector<int64_t>& x) {
  int64_t out = 0;
  bool overflow = false;
  if (kind == "_operator.neg" && x.size() == 1) {
    overflow = __builtin_sub_overflow(int64_t{0}, x[0], &out);
  } else if (x.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(kind, " takes two sizes, not ", x.size()));
  } else if (kind == "_operator.add") {
    overflow = __builtin_add_overflow(x[0], x[1], &out);
  } else if (kind == "_operator.sub") {
    overflow = __builtin_sub_overflow(x[0], x[1], &out);
  } else if (kind == "_operator.mul") {
    overflow = __builtin_mul_overflow(x[0], x[1], &out);
  } else if (kind == "_operator.floordiv" || kind == "_operator.mod") {
    if (x[1] == 0) return absl::InvalidArgumentError(absl::StrCat(kind, " by zero"));
    if (x[1] == -1 && x[0] == std::numeric_limits<int64_t>::min()) {
      return absl::InvalidArgumentError(absl::StrCat(kind, " overflows"));
    }
    int64_t q = x[0] / x[1];
    if ((x[0] % x[1] != 0) && ((x[0] < 0) != (x[1] < 0))) --q;
    out = kind == "_operator.mod" ? x[0] - q * x[1] : q;
  } else if (kind == "torch.sym_max") {
    out = std::max(x[0], x[1]);
  } else if (kind == "torch.sym_min") {
    out = std::min(x[0], x[1]);
  }
  if (overflow) return absl::InvalidArgumentError(absl::StrCat(kind, " overflows"));
  return out;
}

bool IsSizeArithmetic(const std::string& target) {
  for (const char* op : {"_operator.add", "_operator.sub", "_operator.mul",
                         "_operator.floordiv", "_operator.mod", "_operator.neg",
                         "torch.sym_max", "torch.sym_min"}) {
    if (target == op) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<ExportedProgram> ExportedProgram::Load(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<PyTorchStreamReader> archive, OpenArchive(path));
  ASSIGN_OR_RETURN(std::string text, ReadText(*archive, path, kProgramRecord));
  ASSIGN_OR_RETURN(Struct json, ParseJson(text, path, kProgramRecord));
  const Reader r(path);
  ExportedProgram p;
  p.path_ = path;
  if (const Value* v = r.Get(json, "torch_version"); v != nullptr && v->has_string_value()) {
    p.torch_version_ = v->string_value();
  }
  ASSIGN_OR_RETURN(const Struct* version, r.Field(json, "schema_version", "the program"));
  ASSIGN_OR_RETURN(int64_t major, r.Int(r.Get(*version, "major"), "schema_version.major"));
  if (major != kSchemaMajor) {
    ASSIGN_OR_RETURN(int64_t minor, r.Int(r.Get(*version, "minor"), "schema_version.minor"));
    return r.Invalid("schema_version",
                     absl::StrCat("written with export schema ", major, ".", minor, " (by torch ",
                                  p.torch_version_, "); this reader takes schema ",
                                  kSchemaMajor, ".x (torch 2.11): export it again with a "
                                  "torch of that schema"));
  }
  ASSIGN_OR_RETURN(const Struct* module, r.Field(json, "graph_module", "the program"));
  ASSIGN_OR_RETURN(const Struct* graph, r.Field(*module, "graph", "graph_module"));
  ASSIGN_OR_RETURN(const Struct* signature, r.Field(*module, "signature", "graph_module"));
  ASSIGN_OR_RETURN(const Struct* tensor_values, r.Field(*graph, "tensor_values", "graph"));

  // Placeholders: graph.inputs, one input spec each, in the same order.
  ASSIGN_OR_RETURN(const ListValue* inputs, r.List(r.Get(*graph, "inputs"), "graph.inputs"));
  ASSIGN_OR_RETURN(const ListValue* input_specs,
                   r.List(r.Get(*signature, "input_specs"), "signature.input_specs"));
  if (inputs->values_size() != input_specs->values_size()) {
    return r.Invalid("signature.input_specs", "not one per graph input");
  }
  for (int i = 0; i < inputs->values_size(); ++i) {
    const std::string where = absl::StrCat("graph.inputs[", i, "]");
    ASSIGN_OR_RETURN(ExportedArgument input, r.Argument(&inputs->values(i), where));
    ASSIGN_OR_RETURN(auto spec, r.Union(&input_specs->values(i),
                                        absl::StrCat("signature.input_specs[", i, "]")));
    if (input.kind != Kind::kTensor) {
      return r.Invalid(where, absl::StrCat("a ", spec.first, " that is not a tensor (a "
                                           "constant or an object), which this reader does "
                                           "not take"));
    }
    ExportedPlaceholder ph;
    ph.name = input.names[0];
    ph.fqn = ph.name;
    ASSIGN_OR_RETURN(const Struct* s, r.Obj(spec.second, where));
    const char* fqn_key = nullptr;
    if (spec.first == "parameter") {
      ph.kind = ExportedPlaceholder::Kind::kParameter;
      fqn_key = "parameter_name";
    } else if (spec.first == "buffer") {
      ph.kind = ExportedPlaceholder::Kind::kBuffer;
      fqn_key = "buffer_name";
    } else if (spec.first == "tensor_constant") {
      ph.kind = ExportedPlaceholder::Kind::kConstant;
      fqn_key = "tensor_constant_name";
    } else if (spec.first == "user_input") {
      ph.kind = ExportedPlaceholder::Kind::kUserInput;
    } else {
      return r.Invalid(where, absl::StrCat("an input of kind ", spec.first,
                                           ", which this reader does not take"));
    }
    if (fqn_key != nullptr) {
      ASSIGN_OR_RETURN(ph.fqn, r.Str(r.Get(*s, fqn_key), where));
    }
    const std::string meta_where = absl::StrCat("tensor_values '", ph.name, "'");
    ASSIGN_OR_RETURN(const Struct* meta,
                     r.Obj(r.Get(*tensor_values, ph.name.c_str()), meta_where));
    ASSIGN_OR_RETURN(ph.dtype, r.Dtype(r.Get(*meta, "dtype"), meta_where + ".dtype"));
    ASSIGN_OR_RETURN(ph.sizes, r.Sizes(r.Get(*meta, "sizes"), meta_where + ".sizes"));
    p.placeholders_.push_back(std::move(ph));
  }

  ASSIGN_OR_RETURN(const ListValue* nodes, r.List(r.Get(*graph, "nodes"), "graph.nodes"));
  for (int i = 0; i < nodes->values_size(); ++i) {
    std::string where = absl::StrCat("node #", i);
    ASSIGN_OR_RETURN(const Struct* n, r.Obj(&nodes->values(i), where));
    ExportedNode node;
    if (const Value* name = r.Get(*n, "name"); name != nullptr && name->has_string_value()) {
      node.name = name->string_value();
      where = absl::StrCat("node '", node.name, "'");
    }
    ASSIGN_OR_RETURN(node.target, r.Str(r.Get(*n, "target"), where + ".target"));
    constexpr char kAten[] = "torch.ops.aten.";
    if (absl::StartsWith(node.target, kAten)) {
      const std::string op = node.target.substr(sizeof(kAten) - 1);
      const size_t dot = op.rfind('.');
      const std::string name = op.substr(0, dot);
      std::string overload = dot == std::string::npos ? "" : op.substr(dot + 1);
      if (overload == "default") overload.clear();
      node.kind = absl::StrCat("aten::", name);
      node.op = c10::Dispatcher::singleton().findSchema({node.kind, overload});
      if (!node.op.has_value()) {
        return r.Invalid(where, absl::StrCat("this LibTorch has no op ", node.target,
                                             " (exported by torch ", p.torch_version_, ")"));
      }
    } else if (IsSizeArithmetic(node.target)) {
      node.kind = node.target;
    } else {
      return r.Invalid(where, absl::StrCat("calls ", node.target, ", which this reader does "
                                           "not run (only aten ops and size arithmetic)"));
    }
    ASSIGN_OR_RETURN(const ListValue* args, r.List(r.Get(*n, "inputs"), where + ".inputs"));
    for (int k = 0; k < args->values_size(); ++k) {
      const std::string arg_where = absl::StrCat(where, ".inputs[", k, "]");
      ASSIGN_OR_RETURN(const Struct* named, r.Obj(&args->values(k), arg_where));
      std::string arg_name;
      if (const Value* v = r.Get(*named, "name"); v != nullptr && v->has_string_value()) {
        arg_name = v->string_value();
      }
      if (node.op.has_value() && !node.op->schema().argumentIndexWithName(arg_name)) {
        return r.Invalid(arg_where, absl::StrCat(node.target, " has no argument '", arg_name,
                                                 "'"));
      }
      ASSIGN_OR_RETURN(ExportedArgument a, r.Argument(r.Get(*named, "arg"), arg_where));
      node.inputs.emplace_back(std::move(arg_name), std::move(a));
    }
    ASSIGN_OR_RETURN(const ListValue* outs, r.List(r.Get(*n, "outputs"), where + ".outputs"));
    for (int k = 0; k < outs->values_size(); ++k) {
      ASSIGN_OR_RETURN(ExportedArgument a,
                       r.Argument(&outs->values(k), absl::StrCat(where, ".outputs[", k, "]")));
      node.outputs.push_back(std::move(a));
    }
    p.nodes_.push_back(std::move(node));
  }

  ASSIGN_OR_RETURN(const ListValue* outputs, r.List(r.Get(*graph, "outputs"), "graph.outputs"));
  ASSIGN_OR_RETURN(const ListValue* output_specs,
                   r.List(r.Get(*signature, "output_specs"), "signature.output_specs"));
  if (outputs->values_size() != output_specs->values_size()) {
    return r.Invalid("signature.output_specs", "not one per graph output");
  }
  int user_outputs = 0;
  for (int i = 0; i < outputs->values_size(); ++i) {
    const std::string where = absl::StrCat("graph.outputs[", i, "]");
    ASSIGN_OR_RETURN(ExportedArgument out, r.Argument(&outputs->values(i), where));
    ASSIGN_OR_RETURN(auto spec, r.Union(&output_specs->values(i), where));
    if (spec.first == "user_output" || spec.first == "loss_output") {
      ++user_outputs;
      p.user_output_ = static_cast<size_t>(i);
      if (out.kind != Kind::kTensor) {
        return r.Invalid(where, "the model returns something that is not a tensor: it must "
                                "return one tensor (the logits or the output the loss is "
                                "taken of)");
      }
    } else if (spec.first == "buffer_mutation") {
      ASSIGN_OR_RETURN(const Struct* s, r.Obj(spec.second, where));
      ASSIGN_OR_RETURN(std::string buffer, r.Str(r.Get(*s, "buffer_name"), where));
      p.buffer_updates_.emplace_back(static_cast<size_t>(i), std::move(buffer));
    } else {
      return r.Invalid(where, absl::StrCat("an output of kind ", spec.first,
                                           ", which this reader does not take"));
    }
    p.outputs_.push_back(std::move(out));
  }
  if (user_outputs != 1) {
    return r.Invalid("signature.output_specs",
                     absl::StrCat("the model returns ", user_outputs, " values: it must return "
                                  "one tensor (the logits or the output the loss is taken of)"));
  }
  return p;
}

absl::StatusOr<std::map<std::string, at::Tensor>> ExportedProgram::Weights() const {
  ASSIGN_OR_RETURN(std::unique_ptr<PyTorchStreamReader> archive, OpenArchive(path_));
  std::map<std::string, at::Tensor> out;
  RETURN_IF_ERROR(ReadPayloads(*archive, path_, kWeightsConfig, kWeightsDir, out));
  bool constants = false;
  try {
    constants = archive->hasRecord(kConstantsConfig);
  } catch (const c10::Error&) {
  }
  if (constants) RETURN_IF_ERROR(ReadPayloads(*archive, path_, kConstantsConfig, kConstantsDir, out));
  for (const ExportedPlaceholder& ph : placeholders_) {
    if (ph.kind != ExportedPlaceholder::Kind::kUserInput && !out.count(ph.fqn)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "torch.export program '", path_, "' saves no weights for '", ph.fqn, "'"));
    }
  }
  return out;
}

absl::StatusOr<std::vector<c10::IValue>> ExportedProgram::Run(
    const std::vector<at::Tensor>& values, const Observer& observer) const {
  if (values.size() != placeholders_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "torch.export program '", path_, "' takes ", placeholders_.size(),
        " placeholder values, not ", values.size()));
  }
  absl::flat_hash_map<std::string, c10::IValue> env;
  for (size_t i = 0; i < values.size(); ++i) env[placeholders_[i].name] = values[i];
  auto fail = [&](const ExportedNode& node, const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(
        "torch.export program '", path_, "': node '", node.name, "' (", node.target, ") ",
        what));
  };
  auto lookup = [&](const ExportedNode& node,
                    const std::string& name) -> absl::StatusOr<c10::IValue> {
    auto it = env.find(name);
    if (it == env.end()) return fail(node, absl::StrCat("reads '", name, "', which no earlier node gives"));
    return it->second;
  };
  auto size_of = [&](const ExportedNode& node, const ExportedArgument& a,
                     size_t k) -> absl::StatusOr<int64_t> {
    if (a.names[k].empty()) return a.ints[k];
    ASSIGN_OR_RETURN(c10::IValue v, lookup(node, a.names[k]));
    if (!v.isInt()) return fail(node, absl::StrCat("reads '", a.names[k], "' as a size"));
    return v.toInt();
  };
  // An argument as the op takes it; `tensor` when the schema wants a tensor
  // (a number written there is a wrapped number, as Python passes it).
  auto to_ivalue = [&](const ExportedNode& node, const ExportedArgument& a,
                       bool tensor) -> absl::StatusOr<c10::IValue> {
    switch (a.kind) {
      case Kind::kNone: return c10::IValue();
      case Kind::kTensor: return lookup(node, a.names[0]);
      case Kind::kTensors: {
        c10::List<at::Tensor> list;
        for (const std::string& name : a.names) {
          ASSIGN_OR_RETURN(c10::IValue v, lookup(node, name));
          if (!v.isTensor()) return fail(node, absl::StrCat("reads '", name, "' as a tensor"));
          list.push_back(v.toTensor());
        }
        return c10::IValue(list);
      }
      case Kind::kOptionalTensors: {
        c10::List<std::optional<at::Tensor>> list;
        for (const std::string& name : a.names) {
          if (name.empty()) {
            list.push_back(std::nullopt);
            continue;
          }
          ASSIGN_OR_RETURN(c10::IValue v, lookup(node, name));
          if (!v.isTensor()) return fail(node, absl::StrCat("reads '", name, "' as a tensor"));
          list.push_back(v.toTensor());
        }
        return c10::IValue(list);
      }
      case Kind::kInt:
        if (tensor) return c10::IValue(at::native::wrapped_scalar_tensor(c10::Scalar(a.ints[0])));
        return c10::IValue(a.ints[0]);
      case Kind::kBool:
        if (tensor) return c10::IValue(at::native::wrapped_scalar_tensor(c10::Scalar(a.ints[0] != 0)));
        return c10::IValue(a.ints[0] != 0);
      case Kind::kFloat:
        if (tensor) return c10::IValue(at::native::wrapped_scalar_tensor(c10::Scalar(a.floats[0])));
        return c10::IValue(a.floats[0]);
      case Kind::kInts: return c10::IValue(a.ints);
      case Kind::kBools: {
        c10::List<bool> list;
        for (int64_t b : a.ints) list.push_back(b != 0);
        return c10::IValue(list);
      }
      case Kind::kFloats: return c10::IValue(a.floats);
      case Kind::kString: return c10::IValue(a.text);
      case Kind::kSymInt: {
        ASSIGN_OR_RETURN(int64_t n, size_of(node, a, 0));
        return c10::IValue(n);
      }
      case Kind::kSymInts: {
        std::vector<int64_t> sizes;
        for (size_t k = 0; k < a.names.size(); ++k) {
          ASSIGN_OR_RETURN(int64_t n, size_of(node, a, k));
          sizes.push_back(n);
        }
        return c10::IValue(sizes);
      }
      case Kind::kScalarType: return c10::IValue(a.scalar_type);
      case Kind::kMemoryFormat: return c10::IValue(a.memory_format);
      case Kind::kLayout: return c10::IValue(a.layout);
      case Kind::kDevice: return c10::IValue(c10::Device(c10::kCPU));
    }
    return fail(node, "has an argument of an unknown kind");
  };

  for (const ExportedNode& node : nodes_) {
    std::vector<c10::IValue> stack;
    if (node.op.has_value()) {
      const c10::FunctionSchema& schema = node.op->schema();
      for (const c10::Argument& arg : schema.arguments()) {
        const ExportedArgument* given = nullptr;
        for (const auto& [name, a] : node.inputs) {
          if (name == arg.name()) given = &a;
        }
        if (given != nullptr) {
          const bool tensor = arg.type()->kind() == c10::TypeKind::TensorType;
          ASSIGN_OR_RETURN(c10::IValue v, to_ivalue(node, *given, tensor));
          stack.push_back(std::move(v));
        } else if (arg.default_value().has_value()) {
          stack.push_back(*arg.default_value());
        } else {
          return fail(node, absl::StrCat("does not give argument '", arg.name(),
                                         "', which has no default"));
        }
      }
    } else {
      for (const auto& [name, a] : node.inputs) {
        ASSIGN_OR_RETURN(c10::IValue v, to_ivalue(node, a, false));
        stack.push_back(std::move(v));
      }
    }
    const std::vector<c10::IValue> arguments = stack;
    if (node.op.has_value()) {
      std::string message;
      try {
        node.op->callBoxed(&stack);
      } catch (const c10::Error& e) {
        message = e.what_without_backtrace();
      } catch (const std::exception& e) {
        message = e.what();
      }
      if (!message.empty()) {
        return fail(node, absl::StrCat("failed on the given input sizes (are they what the "
                                       "model expects?): ", message));
      }
    } else {
      std::vector<int64_t> sizes;
      for (const c10::IValue& v : stack) {
        if (!v.isInt()) return fail(node, "takes something that is not a size");
        sizes.push_back(v.toInt());
      }
      absl::StatusOr<int64_t> n = SizeArithmetic(node.kind, sizes);
      if (!n.ok()) return fail(node, std::string(n.status().message()));
      stack = {c10::IValue(*n)};
    }
    if (stack.size() != node.outputs.size()) {
      return fail(node, absl::StrCat("returned ", stack.size(), " values; the file lists ",
                                     node.outputs.size()));
    }
    for (size_t k = 0; k < stack.size(); ++k) {
      const ExportedArgument& out = node.outputs[k];
      if (out.kind == Kind::kTensor || (out.kind == Kind::kSymInt && !out.names[0].empty())) {
        env[out.names[0]] = stack[k];
      } else if (out.kind == Kind::kTensors) {
        if (!stack[k].isTensorList() || stack[k].toTensorList().size() != out.names.size()) {
          return fail(node, "returned another number of tensors than the file lists");
        }
        const c10::List<at::Tensor> list = stack[k].toTensorList();
        for (size_t j = 0; j < out.names.size(); ++j) env[out.names[j]] = list.get(j);
      }
    }
    if (observer) RETURN_IF_ERROR(observer(node, arguments, stack));
  }
  std::vector<c10::IValue> outputs;
  for (const ExportedArgument& out : outputs_) {
    if (out.kind == Kind::kTensor) {
      auto it = env.find(out.names[0]);
      if (it == env.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "torch.export program '", path_, "' returns '", out.names[0],
            "', which no node gives"));
      }
      outputs.push_back(it->second);
    } else {
      outputs.emplace_back();
    }
  }
  return outputs;
}

}  // namespace rdmaflow::graph
