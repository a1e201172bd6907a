"""rdmaflow_install: rdmaflow as a C++ library for builds other than Bazel.

`bazel run -c opt //:install -- --prefix=DIR` puts under DIR
  lib/librdmaflow.so                    the public targets' code, one library
  include/rdmaflow/...                  their headers (generated .pb.h too)
  lib/pkgconfig/rdmaflow.pc             for pkg-config
  lib/cmake/rdmaflow/rdmaflowConfig*.cmake  for CMake's find_package
(docs/using_rdmaflow.md). The library holds every rdmaflow object file the
`deps` reach, linked whole, and links the system libraries (Abseil, UCX,
libibverbs, LibTorch, ...) dynamically, as their Debian packages ship them.
"""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")
load("@rdmaflow_torch//:torch_info.bzl", "TORCH_DIR")

def _strip_repository(path):
    # A file of another repository has a short path "../<repo>/<path>".
    if path.startswith("../"):
        return path.split("/", 2)[2]
    return path

def _rdmaflow_install_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)
    features = cc_common.configure_features(
        ctx = ctx,
        cc_toolchain = cc_toolchain,
        requested_features = ctx.features,
        unsupported_features = ctx.disabled_features,
    )
    ours = ctx.label.workspace_name
    merged = cc_common.merge_cc_infos(cc_infos = [d[CcInfo] for d in ctx.attr.deps])

    # rdmaflow's own archives, linked whole (nothing in the library calls
    # most of their symbols: its users do); the system libraries' link flags
    # as they come.
    # Each of rdmaflow's linker inputs keeps its own flags, in order.
    inputs = []
    for linker_input in merged.linking_context.linker_inputs.to_list():
        if linker_input.owner.workspace_name != ours:
            inputs.append(linker_input)
            continue
        libraries = []
        for library in linker_input.libraries:
            if library.pic_static_library == None:
                if library.static_library != None or library.dynamic_library != None:
                    fail("%s has no position-independent archive to link into lib%s.so" %
                         (linker_input.owner, ctx.attr.library))
                continue
            libraries.append(cc_common.create_library_to_link(
                actions = ctx.actions,
                feature_configuration = features,
                cc_toolchain = cc_toolchain,
                pic_static_library = library.pic_static_library,
                alwayslink = True,
            ))
        inputs.append(cc_common.create_linker_input(
            owner = linker_input.owner,
            libraries = depset(libraries),
            user_link_flags = depset(linker_input.user_link_flags),
            additional_inputs = depset(linker_input.additional_inputs),
        ))
    linked = cc_common.link(
        actions = ctx.actions,
        feature_configuration = features,
        cc_toolchain = cc_toolchain,
        linking_contexts = [cc_common.create_linking_context(
            linker_inputs = depset(inputs),
        )],
        name = ctx.attr.library,
        output_type = "dynamic_library",
        user_link_flags = ["-Wl,-soname,lib%s.so" % ctx.attr.library],
    )
    shared = linked.library_to_link.resolved_symlink_dynamic_library or \
             linked.library_to_link.dynamic_library

    # What goes where: "<runfiles path> <path under the prefix>" per line.
    headers = [
        h
        for h in merged.compilation_context.headers.to_list()
        if h.owner.workspace_name == ours
    ]
    manifest = ["%s lib/lib%s.so" % (shared.short_path, ctx.attr.library)]
    for h in headers:
        manifest.append("%s include/rdmaflow/%s" % (h.short_path, _strip_repository(h.short_path)))
    configs = []
    for f in ctx.files.config_files:
        if f.basename.endswith(".in"):
            filled = ctx.actions.declare_file(
                "%s_config/%s" % (ctx.label.name, f.basename[:-len(".in")]),
            )
            ctx.actions.expand_template(
                template = f,
                output = filled,
                substitutions = {"@VERSION@": ctx.attr.version, "@TORCH_DIR@": TORCH_DIR},
            )
            f = filled
        configs.append(f)
        manifest.append("%s %s/%s" % (
            f.short_path,
            "lib/pkgconfig" if f.basename.endswith(".pc") else "lib/cmake/rdmaflow",
            f.basename,
        ))
    manifest_file = ctx.actions.declare_file(ctx.label.name + ".manifest")
    ctx.actions.write(manifest_file, "\n".join(manifest) + "\n")

    script = ctx.actions.declare_file(ctx.label.name)
    ctx.actions.expand_template(
        template = ctx.file._script,
        output = script,
        substitutions = {
            "%WORKSPACE%": ctx.workspace_name,
            "%MANIFEST%": manifest_file.short_path,
        },
        is_executable = True,
    )
    runfiles = ctx.runfiles(files = [shared, manifest_file] + headers + configs)
    return [DefaultInfo(
        executable = script,
        files = depset([script, shared]),
        runfiles = runfiles,
    )]

rdmaflow_install = rule(
    implementation = _rdmaflow_install_impl,
    attrs = {
        "deps": attr.label_list(providers = [CcInfo], doc = "The public targets to install."),
        "library": attr.string(default = "rdmaflow", doc = "lib<library>.so"),
        "config_files": attr.label_list(
            allow_files = True,
            doc = ("*.pc and CMake files; @VERSION@ and @TORCH_DIR@ (the torch " +
                   "package the build used) are filled in those named *.in."),
        ),
        "version": attr.string(mandatory = True, doc = "major.minor.patch"),
        "_script": attr.label(allow_single_file = True, default = "//bazel/install:install.sh.tpl"),
        "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain"),
    },
    executable = True,
    fragments = ["cpp"],
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
)
