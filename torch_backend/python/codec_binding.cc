// File: codec_binding.cc
#include "torch_backend/python/codec_binding.h"

#include <pybind11/stl.h>
#include <ATen/ATen.h>
#include <torch/csrc/utils/pybind.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compression/codec.h"

namespace py = pybind11;

namespace rdmaflow::torch_backend {
namespace {

[[noreturn]] void Raise(const absl::Status& status) {
  if (status.code() == absl::StatusCode::kInvalidArgument) {
    throw py::value_error(std::string(status.message()));
  }
  throw std::runtime_error("rdmaflow codec: " + status.ToString());
}

py::object RoundTuple(const compression::Round& round) {
  return py::make_tuple(compression::ExchangeName(round.exchange),
                        collectives::DataTypeName(round.type), round.offset, round.bytes);
}

// A float32, CPU, contiguous tensor of `count` elements, as a span.
absl::Span<float> FloatSpan(const at::Tensor& t, size_t count, const char* what) {
  if (t.scalar_type() != at::kFloat || !t.is_cpu() || !t.is_contiguous() ||
      static_cast<size_t>(t.numel()) != count) {
    throw py::value_error(absl::StrCat("rdmaflow_torch.Codec: ", what,
                                       " must be a contiguous float32 CPU tensor of ", count,
                                       " elements; got ", std::string(t.toString()), " of ",
                                       t.numel()));
  }
  return absl::MakeSpan(t.data_ptr<float>(), count);
}

// Thread-compatible (the GIL serializes Python's calls).
class PyCodec {
 public:
  PyCodec(const std::string& spec, int rank, int world, int64_t count, uint64_t seed) {
    if (count < 1) {
      throw py::value_error(absl::StrCat("rdmaflow_torch.Codec: count must be >= 1, got ", count));
    }
    absl::StatusOr<std::unique_ptr<compression::Codec>> made = compression::CreateCodec(
        spec, compression::CodecContext{rank, world, seed}, static_cast<size_t>(count));
    if (!made.ok()) Raise(made.status());
    codec_ = std::move(made).value();
    scratch_ = at::zeros({static_cast<int64_t>(codec_->scratch_bytes())}, at::kByte);
  }

  std::string spec() const { return codec_->spec(); }
  int64_t count() const { return static_cast<int64_t>(codec_->count()); }
  int64_t max_message_bytes() const { return static_cast<int64_t>(codec_->max_message_bytes()); }
  at::Tensor scratch() const { return scratch_; }
  at::Tensor residual() const {
    absl::Span<const float> r = codec_->residual();
    return at::from_blob(const_cast<float*>(r.data()), {static_cast<int64_t>(r.size())},
                         at::kFloat)
        .clone();
  }

  py::object Begin(const at::Tensor& gradient, uint64_t step) {
    absl::Span<float> g = FloatSpan(gradient, codec_->count(), "the gradient");
    absl::StatusOr<compression::Round> round = codec_->Begin(g, step, Scratch());
    if (!round.ok()) Raise(round.status());
    return RoundTuple(*round);
  }

  py::object Next(const std::vector<at::Tensor>& gathered, const at::Tensor& out, double scale) {
    absl::Span<float> o = FloatSpan(out, codec_->count(), "out");
    std::vector<absl::Span<const std::byte>> messages;
    for (const at::Tensor& m : gathered) {
      if (m.scalar_type() != at::kByte || !m.is_cpu() || !m.is_contiguous()) {
        throw py::value_error("rdmaflow_torch.Codec.next: gathered messages must be contiguous "
                              "uint8 CPU tensors");
      }
      messages.emplace_back(static_cast<const std::byte*>(m.data_ptr()),
                            static_cast<size_t>(m.numel()));
    }
    absl::StatusOr<std::optional<compression::Round>> next =
        codec_->Next(Scratch(), messages, o, static_cast<float>(scale));
    if (!next.ok()) Raise(next.status());
    if (!next->has_value()) return py::none();
    return RoundTuple(**next);
  }

 private:
  absl::Span<std::byte> Scratch() {
    return absl::MakeSpan(static_cast<std::byte*>(scratch_.data_ptr()),
                          static_cast<size_t>(scratch_.numel()));
  }

  std::unique_ptr<compression::Codec> codec_;
  at::Tensor scratch_;  // uint8; what the collectives exchange
};

}  // namespace

void BindCodec(py::module_& module) {
  module.def(
      "validate_codec",
      [](const std::string& spec) {
        absl::Status valid = compression::ValidateCodecSpec(spec);
        if (!valid.ok()) Raise(valid);
      },
      py::arg("spec"), "Raises ValueError naming what is wrong with a codec spec.");
  py::class_<PyCodec>(module, "Codec",
                      "A gradient codec (docs/compression.md): encodes a float32 tensor into "
                      "its scratch, names the collective each round needs, decodes the "
                      "result. One per tensor: it keeps the tensor's residual (error feedback).")
      .def(py::init<const std::string&, int, int, int64_t, uint64_t>(), py::arg("spec"),
           py::arg("rank"), py::arg("world"), py::arg("count"), py::arg("seed") = 0)
      .def_property_readonly("spec", &PyCodec::spec)
      .def_property_readonly("count", &PyCodec::count)
      .def_property_readonly("max_message_bytes", &PyCodec::max_message_bytes,
                             "The most bytes an all-gather message may have (0: never gathers).")
      .def_property_readonly("scratch", &PyCodec::scratch,
                             "The uint8 tensor the rounds' spans lie in.")
      .def_property_readonly("residual", &PyCodec::residual, "A copy of what is not sent yet.")
      .def("begin", &PyCodec::Begin, py::arg("gradient"), py::arg("step"),
           "Starts a step; returns the first round: (exchange, dtype, offset, bytes).")
      .def("next", &PyCodec::Next, py::arg("gathered"), py::arg("out"), py::arg("scale"),
           "After the round's exchange (gathered: every member's message after an "
           "all-gather, else []): the next round, or None once `out` holds the decoded "
           "sum times `scale`.");
}

}  // namespace rdmaflow::torch_backend
