#!/usr/bin/env python3
"""Packs the rdmaflow_torch module into a wheel (PEP 427), with the standard
library only (no network, no build backend):

  build_wheel.py --module rdmaflow_torch.so --init wheel_init.py \
      --version 0.1.0 --torch_version 2.11.0+cu130 --python_tag cp311 --out DIR

The wheel holds the package rdmaflow_torch/ (__init__.py, which checks the
torch release before loading the compiled module, and the module itself)
and its .dist-info (METADATA requiring that torch release, WHEEL, RECORD).
Its platform tag is linux_x86_64: the module links the machine's UCX,
Abseil and protobuf (Debian 12's), so it installs on machines like the one
that built it. Prints the wheel's path."""
import argparse
import base64
import hashlib
import os
import sys
import zipfile


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--module", required=True, help="the built rdmaflow_torch.so")
    parser.add_argument("--init", required=True, help="the package's __init__.py template")
    parser.add_argument("--version", required=True, help="rdmaflow's version")
    parser.add_argument("--torch_version", required=True, help="torch.__version__ it was built against")
    parser.add_argument("--python_tag", required=True, help="e.g. cp311")
    parser.add_argument("--out", required=True, help="the wheel's path (a .whl file)")
    args = parser.parse_args(argv)
    release = args.torch_version.split("+")[0]
    info = f"rdmaflow_torch-{args.version}.dist-info"
    suffix = f".{args.python_tag.replace('cp', 'cpython-', 1)}-x86_64-linux-gnu.so"
    with open(args.init) as f:
        init = (f.read().replace("@VERSION@", args.version)
                .replace("@TORCH_VERSION@", args.torch_version)).encode()
    with open(args.module, "rb") as f:
        module = f.read()
    files = {
        "rdmaflow_torch/__init__.py": init,
        f"rdmaflow_torch/rdmaflow_torch{suffix}": module,
        f"{info}/METADATA": (
            "Metadata-Version: 2.1\n"
            "Name: rdmaflow-torch\n"
            f"Version: {args.version}\n"
            "Summary: The rdmaflow backend for torch.distributed: one-sided RDMA writes "
            "between registered tensor buffers\n"
            f"Requires-Python: =={args.python_tag[2]}.{args.python_tag[3:]}.*\n"
            f"Requires-Dist: torch=={release}\n").encode(),
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\n"
            "Generator: rdmaflow tools/build_wheel.py\n"
            "Root-Is-Purelib: false\n"
            f"Tag: {args.python_tag}-{args.python_tag}-linux_x86_64\n").encode(),
        f"{info}/top_level.txt": b"rdmaflow_torch\n",
    }
    record = [record_line(name, data) for name, data in files.items()]
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    tmp = args.out + ".tmp"
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files.items():
            entry = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            entry.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(entry, data)
    os.replace(tmp, args.out)
    print(args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
