"""The CUDA toolkit rdmaflow builds its GPU code with (docs/device.md).

rdmaflow_cuda_repository (@rdmaflow_cuda) finds a toolkit: $CUDA_PATH, else
/usr/local/cuda, else Debian's layout (nvcc in /usr/bin, headers in
/usr/include, libraries in /usr/lib/x86_64-linux-gnu). RDMAFLOW_CUDA=off
in the environment builds as if there were none. It holds:

  - :cudart: the CUDA runtime's headers and libcudart_static.a (binaries
    need no libcudart.so at run time; without a driver they start, and
    cudaGetDeviceCount says cudaErrorInsufficientDriver);
  - :nvcc: the compiler, for rdmaflow_cuda_library;
  - cuda_info.bzl: CUDA_FOUND, CUDA_VERSION, CUDA_PATH, and
    CUDA_COMPATIBLE, the target_compatible_with of every CUDA target.

With no toolkit every CUDA target is incompatible: `bazel build //...` and
`bazel test //...` skip them, and everything else builds and passes.
The rule runs again when CUDA_PATH or RDMAFLOW_CUDA changes.

bazel/cuda.bzl's rdmaflow_cuda_library compiles .cu files with it.
"""

# Both BUILD files start with this: a constraint no platform has, which a
# target that needs the toolkit lists where there is none (and is skipped).
_PREAMBLE = """
package(default_visibility = ["//visibility:public"])

constraint_setting(name = "toolkit")

constraint_value(
    name = "missing",
    constraint_setting = ":toolkit",
)
"""

_FOUND_BUILD = """
# The CUDA toolkit at {path} (CUDA {version}).
exports_files(["nvcc"])

cc_library(
    name = "cudart",
    srcs = ["lib/libcudart_static.a"],
    hdrs = glob(["include/**"]),
    includes = ["include"],
    linkopts = [
        "-ldl",
        "-lrt",
        "-pthread",
    ],
)
"""

_MISSING_BUILD = """
# No CUDA toolkit was found ({why}): every CUDA target is incompatible.
cc_library(
    name = "cudart",
    target_compatible_with = [":missing"],
)

genrule(
    name = "no_nvcc",
    outs = ["nvcc"],
    cmd = "echo 'no CUDA toolkit' >&2; exit 1",
    target_compatible_with = [":missing"],
)
"""

def _find(rctx):
    """(path, include, lib) of the toolkit, or (None, why, None)."""
    if rctx.os.environ.get("RDMAFLOW_CUDA", "") == "off":
        return None, "RDMAFLOW_CUDA=off", None
    candidates = []
    if rctx.os.environ.get("CUDA_PATH", ""):
        candidates.append(rctx.os.environ["CUDA_PATH"])
    candidates += ["/usr/local/cuda", "/usr"]
    for path in candidates:
        root = rctx.path(path)
        include = root.get_child("include")
        if not root.get_child("bin").get_child("nvcc").exists:
            continue
        if not include.get_child("cuda_runtime.h").exists:
            continue
        for lib in ["lib64", "lib/x86_64-linux-gnu", "targets/x86_64-linux/lib"]:
            folder = root
            for part in lib.split("/"):
                folder = folder.get_child(part)
            if folder.get_child("libcudart_static.a").exists:
                return path, include, folder
    return None, "no nvcc with cuda_runtime.h and libcudart_static.a under " + ", ".join(candidates), None

def _rdmaflow_cuda_repository_impl(rctx):
    path, include, lib = _find(rctx)
    if path == None:
        rctx.file("BUILD.bazel", _PREAMBLE + _MISSING_BUILD.format(why = include))
        rctx.file("cuda_info.bzl", 'CUDA_FOUND = False\nCUDA_VERSION = ""\nCUDA_PATH = ""\n' +
                                   'CUDA_COMPATIBLE = ["@rdmaflow_cuda//:missing"]\n')
        return
    nvcc = str(rctx.path(path).get_child("bin").get_child("nvcc"))
    version = ""
    result = rctx.execute([nvcc, "--version"])
    for line in result.stdout.splitlines():
        if "release " in line:
            version = line.split("release ")[1].split(",")[0]
    for entry in include.readdir():
        rctx.symlink(entry, "include/" + entry.basename)
    rctx.symlink(lib.get_child("libcudart_static.a"), "lib/libcudart_static.a")
    rctx.file("nvcc", "#!/bin/sh\n# CUDA %s\nexec '%s' \"$@\"\n" % (version, nvcc), executable = True)
    rctx.file("BUILD.bazel", _PREAMBLE + _FOUND_BUILD.format(path = path, version = version))
    rctx.file("cuda_info.bzl", 'CUDA_FOUND = True\nCUDA_VERSION = "%s"\nCUDA_PATH = "%s"\n' %
                               (version, path) + "CUDA_COMPATIBLE = []\n")

rdmaflow_cuda_repository = repository_rule(
    implementation = _rdmaflow_cuda_repository_impl,
    environ = ["CUDA_PATH", "RDMAFLOW_CUDA"],
    local = True,
)
