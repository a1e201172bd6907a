#!/usr/bin/env bash
# tools/install_torch_module.sh, as a user would run it:
#   1. --prefix into a scratch folder, --help, an unknown argument refused;
#   2. into a fresh virtual environment (Debian's /usr/bin/python3 -m venv
#      --system-site-packages, so python3-torch is there): its Python, run
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
/usr/bin/python3 -m venv --system-site-packages --without-pip "$venv"
RDMAFLOW_TORCH_MODULE="$module" tools/install_torch_module.sh --python "$venv/bin/python"
venv_site=$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')
test -f "$venv_site/rdmaflow_torch.so"
# torchrun of Debian's torch 1.13: the flags docs/torch.md gives.
env -i PATH="$venv/bin:/usr/bin:/bin" HOME="$tmp" TMPDIR="$tmp" \
  RDMAFLOW_TRANSPORT_PARAMS=tls=shm timeout -k 20 200 \
  "$venv/bin/python" -m torch.distributed.run --rdzv_backend=c10d \
  --rdzv_endpoint=localhost:0 --rdzv_id="install-test-$$" --nnodes=1 \
  --nproc_per_node=2 --redirects 1 --tee 1 \
  torch_backend/python/install_check.py "$venv_site" 2>&1 | tee "$tmp/out.txt"
test "$(grep -c 'install_check: rank . of 2 passed' "$tmp/out.txt")" = 2

tools/install_torch_module.sh --python "$venv/bin/python" --uninstall
test ! -e "$venv_site/rdmaflow_torch.so"
tools/install_torch_module.sh --prefix "$site" --uninstall
test ! -e "$site/rdmaflow_torch.so"
echo "install_test: passed"
