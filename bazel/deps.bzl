"""rdmaflow_deps(): the repositories rdmaflow needs, for any workspace that
depends on it (and for rdmaflow's own WORKSPACE). Call it from a WORKSPACE
after declaring rdmaflow itself:

    local_repository(name = "rdmaflow", path = "/path/to/rdmaflow")
    load("@rdmaflow//bazel:deps.bzl", "rdmaflow_deps")
    rdmaflow_deps()

Everything it declares is local: nothing is downloaded, so it works with
--experimental_repository_disable_download on a machine with no network.
A repository the workspace already declares (by the same name) is left
alone. See docs/using_rdmaflow.md.

  - @rules_cc, @rules_java, @remote_coverage_tools: stand-ins that re-export
    the native rules. Bazel 4.2.3's @bazel_tools loads the first two, and
    every *_test depends on the third; without them Bazel would download
    them (or, offline, fail with "download is disabled").
  - @com_google_protobuf: the system protobuf (protoc, libprotobuf, the
    well-known types) under /usr, as the native proto rules expect it.
    A workspace that declares its own @com_google_protobuf must make it
    Debian's protobuf 3.21 too: rdmaflow also links the system gRPC, which
    links the system libprotobuf, and two protobuf runtimes in one process
    do not mix.

  - @rdmaflow_torch: the LibTorch to build against (bazel/torch.bzl):
    Debian's 1.13, or with RDMAFLOW_PYTHON=/path/to/python the torch 2.x
    that interpreter imports.
  - @rdmaflow_cuda: the CUDA toolkit, if any (bazel/cuda_repository.bzl);
    without one the GPU targets are skipped.

The C/C++ libraries themselves (Abseil, UCX, libibverbs, LibTorch, ...)
are Debian packages that rdmaflow's own third_party/system wraps;
tools/setup.sh installs them.
"""

load("//bazel:cuda_repository.bzl", "rdmaflow_cuda_repository")
load("//bazel:torch.bzl", "rdmaflow_torch_repository")

def _rdmaflow_dir_impl(rctx):
    # The folder of rdmaflow's source tree named by `subdir`, wherever the
    # rdmaflow repository lives: one symbolic link per entry.
    root = rctx.path(Label("//:WORKSPACE")).dirname
    source = root
    for part in rctx.attr.subdir.split("/"):
        source = source.get_child(part)
    if not source.exists:
        fail("rdmaflow_deps: %s is missing from rdmaflow's source tree at %s" %
             (rctx.attr.subdir, root))
    for entry in source.readdir():
        rctx.symlink(entry, entry.basename)

_rdmaflow_dir = repository_rule(
    implementation = _rdmaflow_dir_impl,
    attrs = {"subdir": attr.string(mandatory = True)},
    local = True,
)

def rdmaflow_deps():
    """Declares the repositories rdmaflow's BUILD files use, unless present."""
    stand_ins = {
        "rules_cc": "third_party/rules_cc",
        "rules_java": "third_party/rules_java",
        "remote_coverage_tools": "third_party/remote_coverage_tools",
    }
    for name, subdir in stand_ins.items():
        if not native.existing_rule(name):
            _rdmaflow_dir(name = name, subdir = subdir)
    if not native.existing_rule("rdmaflow_cuda"):
        rdmaflow_cuda_repository(name = "rdmaflow_cuda")
    if not native.existing_rule("rdmaflow_torch"):
        rdmaflow_torch_repository(name = "rdmaflow_torch")
    if not native.existing_rule("com_google_protobuf"):
        native.new_local_repository(
            name = "com_google_protobuf",
            build_file = str(Label("//third_party/com_google_protobuf:BUILD.system")),
            path = "/usr",
        )
