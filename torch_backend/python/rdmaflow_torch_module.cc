// The rdmaflow_torch Python module: importing it registers the "rdmaflow"
// backend with torch.distributed, so
//   import rdmaflow_torch
//   torch.distributed.init_process_group("rdmaflow")
// runs DistributedDataParallel and the collectives over rdmaflow. Also:
//   rdmaflow_torch.empty(group, shape, dtype)  a tensor in registered memory
//   rdmaflow_torch.stats(group)                the backend's counters (dict)
//   rdmaflow_torch.allreduce_hook              DDP's comm hook, with its
//                                              gradient buckets moved into
//                                              registered memory (ddp_hook.py)
//   rdmaflow_torch.move_to_registered(group, tensor)
//   rdmaflow_torch.register_repeated(group, tensor)
//   rdmaflow_torch.Codec                      a gradient codec over tensors
//                                              (codec_binding.h)
//   rdmaflow_torch.hooks.codec_hook            DDP's comm hook through a codec,
//                                              with hooks.CodecState (hooks.py)
//   rdmaflow_torch.export_graph(module, example_inputs, path)
//                                              the model's training graph for
//                                              `rdmaflow plan` (fx_export.py)
// Errors raise RuntimeError with the backend's message.
#include <pybind11/chrono.h>
#include <pybind11/eval.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "graph_analyzer/text_io.h"
#include "graph_analyzer/training_graph.h"
#include "torch_backend/backend_options.h"
#include "torch_backend/python/codec_binding.h"
#include "torch_backend/process_group_rdmaflow.h"

namespace py = pybind11;

namespace rdmaflow::torch_backend {
namespace {

// The holder of process groups in Python. torch binds c10d.ProcessGroup
// with a holder that drops the GIL before the group is destroyed (its
// destructor joins threads that may need the GIL to run Python callbacks);
// ours does the same.
template <typename T>
class GroupHolder {
 public:
  GroupHolder() = default;
  explicit GroupHolder(T* raw)
      : group_(c10::intrusive_ptr<T>::unsafe_reclaim_from_nonowning(raw)) {}
  explicit GroupHolder(c10::intrusive_ptr<T> group) : group_(std::move(group)) {}
  GroupHolder(const GroupHolder&) = default;
  GroupHolder& operator=(const GroupHolder&) = default;
  ~GroupHolder() {
    if (group_ && PyGILState_Check()) {
      py::gil_scoped_release release;
      group_.reset();
    }
  }
  T* get() const { return group_.get(); }

 private:
  c10::intrusive_ptr<T> group_;
};

}  // namespace
}  // namespace rdmaflow::torch_backend

PYBIND11_DECLARE_HOLDER_TYPE(T, rdmaflow::torch_backend::GroupHolder<T>, true);

namespace rdmaflow::torch_backend {
namespace {

using Holder = GroupHolder<ProcessGroupRdmaflow>;

Holder CreateGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   std::chrono::milliseconds timeout) {
  absl::StatusOr<BackendOptions> options =
      BackendOptions::FromEnvironment(absl::Milliseconds(timeout.count()));
  if (!options.ok()) throw std::runtime_error(std::string(options.status().message()));
  absl::StatusOr<c10::intrusive_ptr<ProcessGroupRdmaflow>> group;
  {
    // Set-up waits for the other ranks; let other Python threads run.
    py::gil_scoped_release release;
    group = ProcessGroupRdmaflow::Create(store, rank, size, *options);
  }
  if (!group.ok()) {
    throw std::runtime_error("rdmaflow: " + std::string(group.status().ToString()));
  }
  return Holder(*std::move(group));
}

// The rdmaflow backend behind `group`: our object itself (what the
// creator returned, or _get_backend()), or the CPU backend of torch's
// ProcessGroup (dist.group.WORLD, new_group()'s result); None for any other
// group. rdmaflow_torch._backend_of in Python (the DDP hook's check).
py::object BackendOf(const py::object& group) {
  if (py::isinstance<ProcessGroupRdmaflow>(group)) return group;
  if (py::hasattr(group, "_get_backend")) {
    py::object cpu = py::module_::import("torch").attr("device")("cpu");
    try {
      py::object backend = group.attr("_get_backend")(cpu);
      if (py::isinstance<ProcessGroupRdmaflow>(backend)) return backend;
    } catch (const py::error_already_set&) {
      // No backend for CPU tensors in this group.
    }
  }
  return py::none();
}

// BackendOf(group), or a TypeError naming `function`.
ProcessGroupRdmaflow& Ours(const py::object& group, const char* function) {
  py::object backend = BackendOf(group);
  if (!backend.is_none()) return backend.cast<ProcessGroupRdmaflow&>();
  throw py::type_error(std::string("rdmaflow_torch.") + function +
                       ": the group is not an rdmaflow process group (pass the group of "
                       "init_process_group('rdmaflow') or new_group(); got " +
                       std::string(py::str(py::repr(group))) + ")");
}

at::Tensor Empty(const py::object& handle, const std::vector<int64_t>& shape,
                 const py::object& dtype) {
  ProcessGroupRdmaflow& group = Ours(handle, "empty");
  if (!THPDtype_Check(dtype.ptr())) {
    throw py::type_error("rdmaflow_torch.empty: dtype must be a torch.dtype");
  }
  absl::StatusOr<at::Tensor> tensor = group.AllocateRegistered(
      shape, reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type);
  if (!tensor.ok()) {
    throw std::runtime_error("rdmaflow: " + std::string(tensor.status().ToString()));
  }
  return *tensor;
}

void MoveToRegistered(const py::object& handle, const at::Tensor& tensor) {
  ProcessGroupRdmaflow& group = Ours(handle, "move_to_registered");
  absl::Status moved;
  {
    py::gil_scoped_release release;  // waits for the operations queued before it
    moved = group.MoveToRegistered(tensor);
  }
  if (!moved.ok()) throw std::runtime_error("rdmaflow: " + moved.ToString());
}

bool RegisterRepeated(const py::object& handle, const at::Tensor& tensor) {
  ProcessGroupRdmaflow& group = Ours(handle, "register_repeated");
  absl::StatusOr<bool> registered;
  {
    py::gil_scoped_release release;
    registered = group.RegisterRepeated(tensor);
  }
  if (!registered.ok()) {
    throw std::runtime_error("rdmaflow: " + registered.status().ToString());
  }
  return *registered;
}

// Seconds per call of the ring's own all-reduce (bench/torch_backend_bench.py
// --bare: the bare collective in the same processes as the torch calls).
double TimeBareAllReduce(const py::object& handle, const at::Tensor& tensor, int iterations) {
  ProcessGroupRdmaflow& group = Ours(handle, "_time_bare_allreduce");
  absl::StatusOr<absl::Duration> time;
  {
    py::gil_scoped_release release;
    time = group.TimeBareAllReduce(tensor, iterations);
  }
  if (!time.ok()) throw std::runtime_error("rdmaflow: " + time.status().ToString());
  return absl::ToDoubleSeconds(*time);
}

py::dict Stats(const py::object& handle) {
  const BackendStats stats = Ours(handle, "stats").stats();
  py::dict out;
  out["allreduces"] = stats.allreduces;
  out["zero_copy_allreduces"] = stats.zero_copy_allreduces;
  out["staged_bytes"] = stats.staged_bytes;
  out["single_copy_allreduces"] = stats.single_copy_allreduces;
  out["single_copy_bytes"] = stats.single_copy_bytes;
  out["single_copy_reads"] = stats.single_copy_reads;
  out["shared_tensors"] = stats.shared_tensors;
  out["shared_tensor_allreduces"] = stats.shared_tensor_allreduces;
  out["shared_tensor_bytes"] = stats.shared_tensor_bytes;
  out["peer_segments_mapped"] = stats.peer_segments_mapped;
  out["peer_segment_reads"] = stats.peer_segment_reads;
  out["peer_segment_fallbacks"] = stats.peer_segment_fallbacks;
  out["device_calls"] = stats.device_calls;
  out["device_staged_bytes"] = stats.device_staged_bytes;
  out["device_p2p_ipc"] = stats.device_p2p_ipc;
  out["device_p2p_inline"] = stats.device_p2p_inline;
  out["device_p2p_pinned"] = stats.device_p2p_pinned;
  out["device_alltoalls"] = stats.device_alltoalls;
  out["device_gathers"] = stats.device_gathers;
  out["device_scatters"] = stats.device_scatters;
  out["device_broadcasts"] = stats.device_broadcasts;
  out["moved_to_device_pool"] = stats.moved_to_device_pool;
  out["device_pool_allreduces"] = stats.device_pool_allreduces;
  out["device_queued_us"] = stats.device_queued_us;
  out["device_wait_us"] = stats.device_wait_us;
  out["device_run_us"] = stats.device_run_us;
  out["device_back_us"] = stats.device_back_us;
  out["device_allreduces"] = stats.device_allreduces;
  out["device_allgathers"] = stats.device_allgathers;
  out["device_reduce_scatters"] = stats.device_reduce_scatters;
  out["noncontiguous_copies"] = stats.noncontiguous_copies;
  out["coalesced_bytes"] = stats.coalesced_bytes;
  out["moved_to_registered"] = stats.moved_to_registered;
  out["moved_bytes"] = stats.moved_bytes;
  out["moves_refused"] = stats.moves_refused;
  out["inline_calls"] = stats.inline_calls;
  out["teardown_failures"] = stats.teardown_failures;
  out["messages_sent"] = stats.messages_sent;
  out["peer_endpoints"] = stats.peer_endpoints;
  out["peer_watches"] = stats.peer_watches;
  out["message_bytes_staged"] = stats.message_bytes_staged;
  return out;
}

// The training graph of a model trace (JSON, from fx_export.py), as
// graph.proto text. ValueError with the builder's message.
std::string TrainingGraphText(const std::string& json, int rank) {
  absl::StatusOr<graph::ModelTrace> trace = graph::ModelTraceFromJson(json);
  if (!trace.ok()) throw py::value_error(std::string(trace.status().message()));
  graph::TrainingGraphOptions options;
  options.rank = rank;
  absl::StatusOr<graph::GraphDef> g = graph::BuildTrainingGraph(*trace, options);
  if (!g.ok()) throw py::value_error(std::string(g.status().message()));
  return graph::ToTextProto(*g);
}

constexpr char kFxExport[] =
#include "torch_backend/python/fx_export.inc"
    ;
constexpr char kDdpHook[] =
#include "torch_backend/python/ddp_hook.inc"
    ;
constexpr char kHooks[] =
#include "torch_backend/python/hooks.inc"
    ;

// The same torch release: "2.11.0+cu130" and "2.11.0+cpu" match (the
// local part names the CUDA build, not the C++ API), "2.11.1" does not.
bool SameRelease(std::string_view a, std::string_view b) {
  return a.substr(0, a.find('+')) == b.substr(0, b.find('+'));
}

}  // namespace
}  // namespace rdmaflow::torch_backend

PYBIND11_MODULE(rdmaflow_torch, m) {
  using namespace rdmaflow::torch_backend;
  constexpr char kModuleDoc[] =
      "rdmaflow: a torch.distributed backend over one-sided RDMA writes.\n\n"
      "import rdmaflow_torch registers the 'rdmaflow' backend:\n"
      "torch.distributed.init_process_group('rdmaflow') (docs/torch.md).\n"
      "Also: allreduce_hook (a DDP communication hook), hooks (gradient\n"
      "codecs), export_graph / trace_model (a model's training step for\n"
      "rdmaflow plan), __version__ and __torch_version__.";
  m.doc() = kModuleDoc;
  // Built against one torch (RDMAFLOW_TORCH_VERSION, from bazel/torch.bzl):
  // under another, LibTorch's C++ types need not match ours.
  const std::string torch_version =
      py::str(py::module_::import("torch").attr("__version__")).cast<std::string>();
  if (!SameRelease(torch_version, RDMAFLOW_TORCH_VERSION)) {
    throw py::import_error(absl::StrCat(
        "rdmaflow_torch ", RDMAFLOW_VERSION, " was built for torch ", RDMAFLOW_TORCH_VERSION,
        " but this Python imports torch ", torch_version,
        "; install the rdmaflow_torch built for torch ", torch_version,
        " or rebuild it against this torch (docs/torch.md, RDMAFLOW_PYTHON)"));
  }
  m.attr("__version__") = RDMAFLOW_VERSION;
  m.attr("__torch_version__") = RDMAFLOW_TORCH_VERSION;
  // c10d's Python types (ProcessGroup, Store) must exist first.
  py::module_ dist = py::module_::import("torch.distributed");
  py::class_<ProcessGroupRdmaflow, c10d::Backend, Holder>(m, "ProcessGroupRdmaflow")
      .def("stats", &Stats, "The backend's counters.");
  m.def("create_process_group", &CreateGroup, py::arg("store"), py::arg("rank"),
        py::arg("size"), py::arg("timeout"),
        "What init_process_group('rdmaflow') calls: a group over `store`.");
  m.def("empty", &Empty, py::arg("group"), py::arg("shape"), py::arg("dtype"),
        "An uninitialized tensor in the group's registered memory: all-reduced in "
        "place and sent without staging. Allocate them in the same order on every "
        "rank.");
  m.def("stats", &Stats, py::arg("group"), "The backend's counters, as a dict.");
  m.def("_time_bare_allreduce", &TimeBareAllReduce, py::arg("group"), py::arg("tensor"),
        py::arg("iterations"),
        "For benchmarks: seconds per call of the ring's own all-reduce of a registered "
        "float32 tensor, with torch.distributed and the backend's Work left out.");
  m.def("_backend_of", &BackendOf, py::arg("group"),
        "The rdmaflow backend behind a process group, or None.");
  m.def("move_to_registered", &MoveToRegistered, py::arg("group"), py::arg("tensor"),
        "Moves a tensor's memory (the whole of its storage, with its views) into the "
        "group's registered pool, after the operations already queued; the old memory "
        "is freed, so nothing may hold its address (tensor.numpy()). RuntimeError "
        "when it cannot (a view, from_numpy/from_blob memory, the pool full).");
  m.def("register_repeated", &RegisterRepeated, py::arg("group"), py::arg("tensor"),
        "Counts a sighting of the tensor's storage and moves it into registered "
        "memory at the second; True when it lies there now (a refusal, such as a "
        "full pool, leaves it staged: False, counted in moves_refused).");
  m.def("_training_graph_text", &TrainingGraphText, py::arg("trace_json"),
        py::arg("rank") = 0, "A model trace (JSON) -> its training graph (text).");
  // export_graph, graph_text, trace_model (fx_export.py); allreduce_hook
  // (ddp_hook.py).
  py::exec(kFxExport, m.attr("__dict__"));
  py::exec(kDdpHook, m.attr("__dict__"));
  m.doc() = kModuleDoc;  // The executed files' docstrings replaced it.
  BindCodec(m);
  py::module_ hooks = m.def_submodule(
      "hooks", "DDP communication hooks through rdmaflow's gradient codecs");
  hooks.attr("Codec") = m.attr("Codec");
  hooks.attr("validate_codec") = m.attr("validate_codec");
  py::exec(kHooks, hooks.attr("__dict__"));
  py::module_::import("sys").attr("modules")["rdmaflow_torch.hooks"] = hooks;
  py::object backend = dist.attr("Backend");
  if (!py::hasattr(backend, "RDMAFLOW")) {
    // CPU and CUDA tensors (one backend object serves both: torch registers
    // a single one when every device maps to the same backend);
    // "cpu:rdmaflow,cuda:nccl" sends CUDA tensors elsewhere.
    py::list devices;
    devices.append("cpu");
    devices.append("cuda");
    backend.attr("register_backend")("rdmaflow", m.attr("create_process_group"),
                                     py::arg("devices") = devices);
  }
}
