"""rdmaflow_cuda_library: .cu sources compiled by nvcc (the toolkit that
bazel/cuda_repository.bzl found) into a cc_library, for sm_90 (the H200)
with PTX for later architectures (docs/device.md)."""

load("@rdmaflow_cuda//:cuda_info.bzl", "CUDA_COMPATIBLE")

# The architectures kernels are built for: sm_90 code (Hopper: H100, H200),
# and compute_90 PTX that later GPUs compile when they load it.
NVCC_ARCH_FLAGS = [
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
]

def rdmaflow_cuda_library(name, srcs, hdrs = [], deps = [], visibility = None, **kwargs):
    """A cc_library of .cu sources compiled by nvcc (one object each), with
    `hdrs` (plain C++ headers, no CUDA in them, for its users) and `deps`.
    Incompatible, so skipped, where no toolkit was found."""
    objects = []
    for src in srcs:
        stem = src.rsplit(".", 1)[0]
        obj = "_nvcc/%s/%s.pic.o" % (name, stem)
        native.genrule(
            name = "%s_%s_nvcc" % (name, stem.replace("/", "_")),
            srcs = [src] + hdrs,
            outs = [obj],
            tools = ["@rdmaflow_cuda//:nvcc"],
            cmd = ("$(location @rdmaflow_cuda//:nvcc) -std=c++17 -O3 -Xcompiler -fPIC " +
                   " ".join(NVCC_ARCH_FLAGS) + " -c $(location %s) -o $@") % src,
            target_compatible_with = CUDA_COMPATIBLE,
            visibility = ["//visibility:private"],
        )
        objects.append(obj)
    native.cc_library(
        name = name,
        srcs = objects,
        hdrs = hdrs,
        deps = deps + [Label("//third_party/system:cudart")],
        target_compatible_with = CUDA_COMPATIBLE,
        visibility = visibility,
        # No shared library of its own: its objects call into the static
        # CUDA runtime, which only a whole binary links.
        linkstatic = True,
        **kwargs
    )
