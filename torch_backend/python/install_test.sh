#!/usr/bin/env bash
# tools/install_torch_module.sh, as a user would run it:
#   1. --prefix into a scratch folder, --help, an unknown argument refused;
#   2. into a fresh virtual environment that sees the build's torch (a .pth
#      file names the torch environment's site-packages): its Python, run
#      with an empty environment (no PYTHONPATH, no wrapper), starts a
#      2-rank torchrun job that imports the installed module and
#      all-reduces over backend "rdmaflow";
#   3. --uninstall removes it from both.
set -euo pipefail
tmp="${TEST_TMPDIR:?}"
module="$PWD/torch_backend/python/rdmaflow_torch.so"
site="$tmp/site-packages"
RDMAFLOW_TORCH_MODULE="$module" tools/install_torch_module.sh --prefix "$site"
test -f "$site/rdmaflow_torch.so"
tools/install_torch_module.sh --help | grep -q -- "--python PYTHON"
if tools/install_torch_module.sh --bogus 2>/dev/null; then
  echo "an unknown argument was accepted" >&2
  exit 1
fi
if RDMAFLOW_TORCH_MODULE="$module" tools/install_torch_module.sh \
    --python /bin/false --prefix "$tmp/none" 2>/dev/null; then
  echo "an interpreter without torch was accepted" >&2
  exit 1
fi

venv="$tmp/venv"
base=$("$RDMAFLOW_PYTHON" -c 'import sys; print(sys._base_executable)')
torch_site=$("$RDMAFLOW_PYTHON" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
"$base" -m venv --without-pip "$venv"
venv_site=$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')
echo "$torch_site" > "$venv_site/torch_environment.pth"
RDMAFLOW_TORCH_MODULE="$module" tools/install_torch_module.sh --python "$venv/bin/python"
test -f "$venv_site/rdmaflow_torch.so"
env -i PATH="$venv/bin:/usr/bin:/bin" HOME="$tmp" TMPDIR="$tmp" \
  RDMAFLOW_TRANSPORT_PARAMS=tls=shm timeout -k 20 200 \
  "$venv/bin/python" -m torch.distributed.run --rdzv_backend=c10d \
  --rdzv_endpoint=localhost:0 --rdzv_id="install-test-$$" --nnodes=1 \
  --nproc_per_node=2 --redirects 1 --tee 1 \
  torch_backend/python/install_check.py "$venv_site" 2>&1 | tee "$tmp/out.txt"
# Two ranks share one stdout: lines can run together, so count matches.
test "$(grep -o 'install_check: rank . of 2 passed' "$tmp/out.txt" | wc -l)" = 2

tools/install_torch_module.sh --python "$venv/bin/python" --uninstall
test ! -e "$venv_site/rdmaflow_torch.so"
tools/install_torch_module.sh --prefix "$site" --uninstall
test ! -e "$site/rdmaflow_torch.so"
echo "install_test: passed"
