#!/usr/bin/env bash
# tools/install_torch_module.sh into a scratch site-packages folder, then
# plain torchrun (Debian's /usr/bin/torchrun, no wrapper) runs a 2-rank job
# that imports the installed module and all-reduces over backend "rdmaflow";
# then --uninstall removes it.
set -euo pipefail
site="${TEST_TMPDIR:?}/site-packages"
RDMAFLOW_TORCH_MODULE="$PWD/torch_backend/python/rdmaflow_torch.so" \
  tools/install_torch_module.sh --prefix "$site"
test -f "$site/rdmaflow_torch.so"
tools/install_torch_module.sh --help | grep -q -- "--prefix DIR"
if tools/install_torch_module.sh --bogus 2>/dev/null; then
  echo "an unknown argument was accepted" >&2
  exit 1
fi
# Plain torchrun; the flags are what Debian's torch 1.13 needs (docs/torch.md).
PYTHONPATH="$site" RDMAFLOW_TRANSPORT_PARAMS=tls=shm \
  /usr/bin/torchrun --rdzv_backend=c10d --rdzv_endpoint=localhost:0 \
  --rdzv_id="install-test-$$" --nnodes=1 --nproc_per_node=2 --redirects 1 --tee 1 \
  torch_backend/python/install_check.py "$site" 2>&1 | tee "$TEST_TMPDIR/out.txt"
test "$(grep -c 'install_check: rank . of 2 passed' "$TEST_TMPDIR/out.txt")" = 2
tools/install_torch_module.sh --prefix "$site" --uninstall
test ! -e "$site/rdmaflow_torch.so"
echo "install_test: passed"
