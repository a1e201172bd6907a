"""cc_grpc_library (from ../shared/recipes/bazel-offline): C++ gRPC stubs from a native proto_library, generated with
the system protoc + grpc_cpp_plugin (Debian: protobuf-compiler,
protobuf-compiler-grpc). No @com_github_grpc_grpc download needed."""

load("//bazel:cc.bzl", "RDMAFLOW_COPTS")

def _cc_grpc_codegen_impl(ctx):
    info = ctx.attr.proto[ProtoInfo]
    out_root = ctx.bin_dir.path
    if ctx.label.workspace_root:
        out_root += "/" + ctx.label.workspace_root
    pkg_prefix = ctx.label.package + "/" if ctx.label.package else ""

    outs = []
    import_paths = []
    for src in info.direct_sources:
        # The import path of a plain proto_library (no strip_import_prefix /
        # import_prefix) is the file's path relative to its repository root.
        short = src.short_path
        if short.startswith("../"):  # external repo: ../<repo>/<path>
            short = short.split("/", 2)[2]
        if not short.startswith(pkg_prefix):
            fail("cc_grpc_library must live in the package of %s" % src.short_path)
        stem = short[len(pkg_prefix):-len(".proto")]
        outs.append(ctx.actions.declare_file(stem + ".grpc.pb.h"))
        outs.append(ctx.actions.declare_file(stem + ".grpc.pb.cc"))
        import_paths.append(short)

    descriptor_sets = info.transitive_descriptor_sets
    args = ctx.actions.args()
    args.add("--plugin=protoc-gen-grpc=" + ctx.executable._plugin.path)
    args.add("--grpc_out=" + out_root)
    args.add_joined("--descriptor_set_in", descriptor_sets, join_with = ":")
    args.add_all(import_paths)

    ctx.actions.run(
        executable = ctx.executable._protoc,
        tools = [ctx.executable._plugin],
        inputs = descriptor_sets,
        outputs = outs,
        arguments = [args],
        mnemonic = "GrpcCppCodegen",
        progress_message = "Generating gRPC C++ stubs for %s" % ctx.label,
    )
    return [DefaultInfo(files = depset(outs))]

_cc_grpc_codegen = rule(
    implementation = _cc_grpc_codegen_impl,
    attrs = {
        "proto": attr.label(mandatory = True, providers = [ProtoInfo]),
        "_protoc": attr.label(
            default = "@com_google_protobuf//:protoc",
            allow_files = True,
            executable = True,
            cfg = "host",
        ),
        "_plugin": attr.label(
            default = "@com_google_protobuf//:grpc_cpp_plugin",
            allow_files = True,
            executable = True,
            cfg = "host",
        ),
    },
)

def cc_grpc_library(name, srcs, deps, **kwargs):
    """srcs: [one proto_library]; deps: its cc_proto_library (+ others)."""
    if len(srcs) != 1:
        fail("srcs must contain exactly one proto_library", "srcs")
    codegen = name + "_codegen"
    _cc_grpc_codegen(name = codegen, proto = srcs[0], visibility = ["//visibility:private"])
    native.cc_library(
        name = name,
        srcs = [":" + codegen],
        hdrs = [":" + codegen],
        deps = deps + ["//third_party/system:grpc++"],
        copts = RDMAFLOW_COPTS,
        **kwargs
    )
