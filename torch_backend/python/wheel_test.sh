#!/usr/bin/env bash
# The rdmaflow_torch wheel as a user installs it:
#   1. pip install (offline) into a fresh virtual environment that sees the
#      build's torch (a .pth file names the torch environment's
#      site-packages); its Python, with an empty environment (no PYTHONPATH,
#      no wrapper), runs a 2-rank all-reduce job under plain torchrun;
#   2. rdmaflow_torch.__version__ and __torch_version__ are the build's;
#   3. under another torch release (a stand-in torch package first on the
#      path), the import fails at once, naming both versions;
#   4. pip uninstall removes it.
set -euo pipefail
tmp="${TEST_TMPDIR:?}"
wheel=$(ls "$PWD"/torch_backend/python/rdmaflow_torch-*.whl)
venv="$tmp/venv"
base=$("$RDMAFLOW_PYTHON" -c 'import sys; print(sys._base_executable)')
torch_site=$("$RDMAFLOW_PYTHON" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
torch_version=$("$RDMAFLOW_PYTHON" -c 'import torch; print(torch.__version__)')
"$base" -m venv "$venv"
site=$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')
echo "$torch_site" > "$site/torch_environment.pth"
in_venv() { env -i PATH="$venv/bin:/usr/bin:/bin" HOME="$tmp" TMPDIR="$tmp" "$@"; }
# --no-deps: the wheel requires torch of its release, which is there, but
# that torch was installed without its own list of CUDA wheels
# (tools/torch_venv.sh), which pip would then look for.
in_venv "$venv/bin/python" -m pip install --no-index --no-deps --disable-pip-version-check \
  -q "$wheel"
test -f "$site/rdmaflow_torch/__init__.py"

in_venv RDMAFLOW_TRANSPORT_PARAMS=tls=shm timeout -k 20 200 \
  "$venv/bin/python" -m torch.distributed.run --rdzv_backend=c10d --rdzv_endpoint=localhost:0 \
  --rdzv_id="wheel-test-$$" --nnodes=1 --nproc_per_node=2 \
  torch_backend/python/install_check.py "$site" 2>&1 | tee "$tmp/out.txt"
# The ranks share one stdout: their lines can run together, so count
# matches, not lines.
test "$(grep -o 'install_check: rank . of 2 passed' "$tmp/out.txt" | wc -l)" = 2

versions=$(in_venv "$venv/bin/python" -c \
  'import rdmaflow_torch as r; print(r.__version__, r.__torch_version__)')
echo "versions: $versions"
[ "$versions" = "$(basename "$wheel" | cut -d- -f2) $torch_version" ]
# The module's own docstring, not one of the Python files it executes.
doc=$(in_venv "$venv/bin/python" -c 'import rdmaflow_torch as r; print(r.__doc__.splitlines()[0])')
echo "doc: $doc"
[ "$doc" = "rdmaflow: a torch.distributed backend over one-sided RDMA writes." ]

mkdir -p "$tmp/other/torch"
echo '__version__ = "1.99.0"' > "$tmp/other/torch/__init__.py"
if in_venv PYTHONPATH="$tmp/other" "$venv/bin/python" -c 'import rdmaflow_torch' \
    2> "$tmp/refused.txt"; then
  echo "wheel_test: rdmaflow_torch imported under torch 1.99.0" >&2
  exit 1
fi
cat "$tmp/refused.txt"
grep -q "built for torch $torch_version but this Python imports torch 1.99.0" "$tmp/refused.txt"

in_venv "$venv/bin/python" -m pip uninstall -y -q rdmaflow-torch
test ! -e "$site/rdmaflow_torch"
echo "wheel_test: passed"
