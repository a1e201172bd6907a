#!/usr/bin/python3
"""Checks the docs against the code; prints "docs: N checks passed" or what
failed, and exits 1 on a failure. tools/test.sh runs it.

  - docs/configuration.md: its first table of variables is exactly the
    RDMAFLOW_* variables that rdmaflow's code (not its tests) reads at run
    time; every RDMAFLOW_* variable of the build (.bzl) and of tools/ is on
    the page; each transport's table holds exactly the keys it accepts
    (CheckKnownParams in rdma/<backend>/<backend>_registry.cc or _transport.cc).
  - docs/build.md names every package tools/setup.sh installs.
  - README.md and docs/quickstart.md: every ```sh block runs (exit 0) from
    the repository root, unless its first line is "# not run by the docs
    check: <why>"; where a ```text block follows, the output holds each of
    its lines, with any number standing for the figures (they differ
    between runs) and any run of spaces for the column padding.
  - README.md and docs/*.md: every relative link names a file that exists,
    and every repository path they quote in backticks (tools/x.sh,
    docs/x.md, bench/x.cc, ...) exists.
"""
import os
import re
import signal
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIP_DIRS = {".git", ".venv", "third_party", "bench-results", "node_modules"}
failures = []
checks = 0


def check(ok, message):
    global checks
    checks += 1
    if not ok:
        failures.append(message)


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
        return f.read()


def source_files(suffixes):
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith("bazel-")]
        for name in files:
            if name.endswith(suffixes):
                yield os.path.relpath(os.path.join(top, name), ROOT)


def is_test_file(path):
    name = os.path.basename(path)
    return (path.startswith("tests/") or "/testing/" in path or
            re.search(r"_(test|check)\.(cc|h|py|sh)$", name) is not None or
            path.startswith("examples/bazel_consumer/"))


def section(text, heading):
    """The lines of `text` under `heading` up to the next heading of its level."""
    level = heading.split(" ")[0]
    lines = text.splitlines()
    start = lines.index(heading) + 1
    end = next((i for i in range(start, len(lines))
                if re.match(r"#{1,%d} " % len(level), lines[i])), len(lines))
    return lines[start:end]


def first_table_names(lines):
    """Backticked names in the first column of the first table of `lines`."""
    names, in_table = set(), False
    for line in lines:
        if line.startswith("|"):
            in_table = True
            cell = line.split("|")[1]
            names.update(re.findall(r"`([A-Za-z0-9_]+)`", cell))
        elif in_table:
            break
    return names


def check_configuration():
    page = read("docs/configuration.md")
    runtime = set()
    for path in source_files((".cc", ".h", ".py")):
        if is_test_file(path):
            continue
        runtime.update(re.findall(r'"(RDMAFLOW_[A-Z0-9_]+)"', read(path)))
    documented = first_table_names(
        section(page, "## Environment variables read at run time"))
    for name in sorted(runtime - documented):
        check(False, f"docs/configuration.md: {name} is read at run time but "
                     "not in the table of run-time variables")
    for name in sorted(documented - runtime):
        check(False, f"docs/configuration.md: {name} is in the table of run-time "
                     "variables but no code reads it")
    check(runtime, "docs_check: found no RDMAFLOW_* variable in the code")
    tooling = set()
    for path in source_files((".bzl", ".sh")):
        if path.endswith(".bzl") or path.startswith("tools/"):
            tooling.update(re.findall(r"\b(RDMAFLOW_[A-Z0-9_]+)\b", read(path)))
    tooling -= {"RDMAFLOW_VERSION", "RDMAFLOW_COPTS", "RDMAFLOW_TORCH_VERSION"}
    for name in sorted(tooling):
        check(name in page, f"docs/configuration.md: {name} (build or tools/) is not on the page")
    for backend in ("ucx", "ibverbs", "loopback"):
        # The registry entry: its own file where the backend has one.
        registry = f"rdma/{backend}/{backend}_registry.cc"
        source = registry if os.path.exists(registry) else f"rdma/{backend}/{backend}_transport.cc"
        code = read(source)
        m = re.search(r"CheckKnownParams\(\s*config,\s*kBackend,\s*\{([^}]*)\}", code)
        check(m is not None, f"{source}: no CheckKnownParams list")
        if m is None:
            continue
        keys = set(re.findall(r'"([a-z_]+)"', m.group(1)))
        table = first_table_names(section(page, f"### {backend}"))
        check(keys == table,
              f"docs/configuration.md, ### {backend}: keys {sorted(table)} but the "
              f"transport accepts {sorted(keys)}")


def check_packages():
    script = read("tools/setup.sh")
    m = re.search(r"PACKAGES=\(([^)]*)\)", script)
    check(m is not None, "tools/setup.sh: no PACKAGES=( ... ) list")
    if m is None:
        return
    page = read("docs/build.md")
    for package in m.group(1).split():
        check(f"`{package}`" in page,
              f"docs/build.md: the package list lacks `{package}` (tools/setup.sh installs it)")


def fenced_blocks(text):
    """(info string, body) of each fenced block, in order."""
    return re.findall(r"^```([a-z]*)\n(.*?)^```$", text, flags=re.M | re.S)


def check_commands(page, skipped):
    blocks = fenced_blocks(read(page))
    for i, (kind, body) in enumerate(blocks):
        if kind != "sh":
            continue
        first = body.splitlines()[0] if body.strip() else ""
        if first.startswith("# not run by the docs check"):
            skipped.append(f"{page}: {first[2:]}")
            continue
        # A session of its own, so that a timeout ends what the block
        # started in the background too.
        process = subprocess.Popen(["bash", "-euo", "pipefail", "-c", body], cwd=ROOT,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, start_new_session=True)
        try:
            output, _ = process.communicate(timeout=600)
            status = process.returncode
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                output = process.communicate(timeout=10)[0]
            except subprocess.TimeoutExpired:
                output = ""
            output += "\n(timed out after 600 s)"
            status = 124
        shown = body.strip().splitlines()[0]
        check(status == 0, f"{page}: `{shown}` ... exited {status}:\n{output[-2000:]}")
        if status != 0 or i + 1 >= len(blocks) or blocks[i + 1][0] != "text":
            continue
        for line in blocks[i + 1][1].splitlines():
            if not line.strip():
                continue
            if not re.search(r"[A-Za-z]", line):
                check(line.strip() in output,
                      f"{page}: `{shown}` ... printed no line '{line.strip()}'")
                continue
            # Any number for a figure, any run of blanks for the padding.
            pattern = re.escape(line.strip())
            pattern = re.sub(r"\d+(?:\\\.\d+)?", "[0-9.]+", pattern)
            pattern = re.sub(r"(?:\\ )+", "[ \\t]+", pattern)
            check(re.search(pattern, output) is not None,
                  f"{page}: `{shown}` ... printed no line like '{line.strip()}'")


def check_references():
    pages = ["README.md"] + sorted("docs/" + n for n in os.listdir(os.path.join(ROOT, "docs"))
                                   if n.endswith(".md"))
    path_pattern = re.compile(
        r"`((?:bench|cli|collectives|common|compression|device|docs|examples|"
        r"graph_analyzer|launch|layers|onesided|rdma|results|runtime|sim|"
        r"strategies|tests|tools|torch_backend|train|bazel)/[A-Za-z0-9_./-]*"
        r"\.(?:sh|py|cc|h|md|bzl|proto|json|pbtxt))`")
    for page in pages:
        text = read(page)
        base = os.path.dirname(page)
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            path = os.path.normpath(os.path.join(base, target))
            check(os.path.exists(os.path.join(ROOT, path)),
                  f"{page}: link to {target}, which does not exist")
        for path in sorted(set(path_pattern.findall(text))):
            if "*" in path or "<" in path:
                continue
            check(os.path.exists(os.path.join(ROOT, path)),
                  f"{page}: names {path}, which does not exist")


def main():
    if len(sys.argv) > 1:
        print(__doc__)
        return 0 if sys.argv[1] in ("-h", "--help") else 2
    check_configuration()
    check_packages()
    check_references()
    skipped = []
    for page in ("README.md", "docs/quickstart.md"):
        check_commands(page, skipped)
    for line in skipped:
        print("not run:", line)
    for message in failures:
        print("FAIL:", message)
    if failures:
        print(f"docs: {len(failures)} of {checks} checks failed")
        return 1
    print(f"docs: {checks} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
