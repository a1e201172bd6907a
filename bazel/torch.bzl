"""rdmaflow_torch_repository: the LibTorch rdmaflow builds against.

rdmaflow builds against the torch 2.x (from PyPI, or any build of it) that
a Python interpreter imports: by default the project's virtual environment
.venv (tools/torch_venv.sh, run by tools/setup.sh, installs the pinned
torch there); with RDMAFLOW_PYTHON=/path/to/python in the environment, the
torch of that interpreter (any venv or conda env):

    RDMAFLOW_PYTHON=$HOME/venv/bin/python bazel build //torch_backend/...

The rule asks the interpreter where torch lives, which version it is and
which C++ ABI it was built with, and exposes its headers and libraries.
Only the header folders LibTorch's own headers need are exposed (ATen, c10,
caffe2, pybind11, torch): a torch wheel's include/ also carries an old
protobuf that would shadow the system one. The C++ code links libtorch_cpu
and libc10 (not libtorch, which would pull libtorch_cuda and the CUDA
libraries into every binary), with an rpath to torch's lib folder; the
Python extension also links libtorch_python and uses torch's own pybind11,
so that it shares torch's pybind11 type registry.

The repository (@rdmaflow_torch) holds :torch, :torch_python, :python (a
wrapper that runs the interpreter, for tests and tools) and torch_info.bzl
(TORCH_VERSION, TORCH_DIR, TORCH_PYTHON, TORCH_PYTHON_VERSION); third_party/system
wraps the libraries with the project's visibility. The rule runs again
when RDMAFLOW_PYTHON changes (`bazel sync --configure` after the
interpreter's torch changed).
"""

_QUERY = """
import json, os, sys, sysconfig
import torch
print(json.dumps({
    "version": torch.__version__,
    "dir": os.path.dirname(torch.__file__),
    "cxx11_abi": int(torch.compiled_with_cxx11_abi()),
    "python_include": sysconfig.get_paths()["include"],
    "python_version": "%d.%d" % sys.version_info[:2],
}))
"""

_HEADER_FOLDERS = ["ATen", "c10", "caffe2", "pybind11", "torch"]

_BUILD = """
# torch {version} from {python} ({dir}).
load("@rdmaflow//bazel:system_library.bzl", "system_library")

package(default_visibility = ["//visibility:public"])

# The interpreter, for tests and tools that run Python with this torch
# ($(rootpath @rdmaflow_torch//:python)).
exports_files(["python"])

cc_library(
    name = "torch",
    hdrs = glob(["include/**"]),
    defines = ["_GLIBCXX_USE_CXX11_ABI={abi}"],
    includes = [
        "include",
        "include/torch/csrc/api/include",
    ],
    linkopts = [
        "-L{lib}",
        "-Wl,-rpath,{lib}",
        "-ltorch_cpu",
        "-lc10",
        "-pthread",
    ],
)

system_library(
    name = "python_headers",
    includes = ["{python_include}"],
)

cc_library(
    name = "torch_python",
    linkopts = ["-ltorch_python"],
    deps = [
        ":python_headers",
        ":torch",
    ],
)
"""

def _fail(python, why):
    fail(("LibTorch: %s: %s. rdmaflow builds against the torch 2.x that a " +
          "Python interpreter imports: by default the project's virtual " +
          "environment (.venv, made by tools/setup.sh or tools/torch_venv.sh); " +
          "RDMAFLOW_PYTHON=/path/to/python chooses another (any venv or conda " +
          "env whose `import torch` gives torch 2.x).") % (python, why))

def _rdmaflow_torch_repository_impl(rctx):
    python = rctx.os.environ.get("RDMAFLOW_PYTHON", "")
    if not python:
        python = str(rctx.path(Label("//:WORKSPACE")).dirname.get_child(".venv").get_child("bin").get_child("python"))
        if not rctx.path(python).exists:
            _fail(python, "no such interpreter (run tools/setup.sh, or set RDMAFLOW_PYTHON)")
    result = rctx.execute([python, "-c", _QUERY], timeout = 300)
    if result.return_code != 0:
        _fail(python, "`import torch` failed: " + (result.stderr.strip() or "exit %d" % result.return_code))
    info = json.decode(result.stdout.strip().splitlines()[-1])
    major = info["version"].split(".")[0]
    if not major.isdigit() or int(major) < 2:
        _fail(python, "it imports torch %s" % info["version"])
    torch_dir = rctx.path(info["dir"])
    for folder in _HEADER_FOLDERS:
        source = torch_dir.get_child("include").get_child(folder)
        if not source.exists:
            _fail(python, "torch %s has no include/%s (is it a full wheel?)" % (info["version"], folder))
        rctx.symlink(source, "include/" + folder)
    rctx.file("python", "#!/bin/sh\n# torch %s\nexec '%s' \"$@\"\n" % (info["version"], python),
              executable = True)
    rctx.file("BUILD.bazel", _BUILD.format(
        version = info["version"],
        python = python,
        dir = info["dir"],
        abi = info["cxx11_abi"],
        lib = info["dir"] + "/lib",
        python_include = info["python_include"],
    ))
    rctx.file("torch_info.bzl", ('TORCH_VERSION = "%s"\nTORCH_DIR = "%s"\nTORCH_PYTHON = "%s"\n' +
                                 'TORCH_PYTHON_VERSION = "%s"\n') %
                                (info["version"], info["dir"], python, info["python_version"]))

rdmaflow_torch_repository = repository_rule(
    implementation = _rdmaflow_torch_repository_impl,
    environ = ["RDMAFLOW_PYTHON"],
    local = True,
)

# For tests that run Python with the build's torch (directly, or through
# tools/torchrun.sh or tools/torch_python.sh): the interpreter as data and
# its path in RDMAFLOW_PYTHON.
TORCH_PYTHON_DATA = ["@rdmaflow_torch//:python"]

TORCH_PYTHON_ENV = {"RDMAFLOW_PYTHON": "$(rootpath @rdmaflow_torch//:python)"}

def torch_python_test(name, data = [], **kwargs):
    """An sh_test whose script runs Python with the build's torch (through
    "$RDMAFLOW_PYTHON", tools/torchrun.sh or tools/torch_python.sh)."""
    native.sh_test(
        name = name,
        env = TORCH_PYTHON_ENV,
        data = TORCH_PYTHON_DATA + data,
        **kwargs
    )
