"""The C++ rules every rdmaflow package uses: native cc_library, cc_binary
and cc_test with the compiler options rdmaflow cannot build without.

The options travel with each target, not with rdmaflow's .bazelrc, so a
workspace that depends on rdmaflow (docs/using_rdmaflow.md) builds it with
its own flags and Bazel's auto-configured toolchain (whose -std=c++0x would
otherwise apply: Abseil, LibTorch and rdmaflow need C++17). Code of the
consumer's own that includes rdmaflow's headers needs C++17 too:
RDMAFLOW_COPTS is public for that.
"""

RDMAFLOW_COPTS = ["-std=c++17"]

def _with_copts(kwargs):
    kwargs["copts"] = RDMAFLOW_COPTS + kwargs.pop("copts", [])
    return kwargs

def rdmaflow_cc_library(**kwargs):
    native.cc_library(**_with_copts(kwargs))

def rdmaflow_cc_binary(**kwargs):
    native.cc_binary(**_with_copts(kwargs))

def rdmaflow_cc_fuzzer(**kwargs):
    """A libFuzzer binary: tools/fuzz.sh builds it with --config=fuzz, which
    supplies clang, the sanitizers and (through //bazel:fuzzing) the fuzzer
    runtime's main. Tagged manual, so `bazel build //...` leaves it out."""
    kwargs["linkopts"] = kwargs.pop("linkopts", []) + select({
        str(Label("//bazel:fuzzing")): ["-fsanitize=fuzzer"],
        "//conditions:default": [],
    })
    kwargs["tags"] = kwargs.pop("tags", []) + ["manual"]
    rdmaflow_cc_binary(**kwargs)

def rdmaflow_cc_test(**kwargs):
    native.cc_test(**_with_copts(kwargs))
