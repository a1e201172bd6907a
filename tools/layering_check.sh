#!/usr/bin/env bash
# Proves the layering rules of layers/BUILD.bazel: for each rule, writes a
# throw-away probe package that breaks it and checks that Bazel refuses to
# analyse it (a visibility error), plus one probe that keeps to the rules
# and must analyse. Prints "layering: N rules enforced" or what slipped
# through, and exits non-zero if any did. Analysis only (--nobuild): seconds.
# First, before any probe exists, it checks that docs/architecture.md's
# package table is what the build graph says (tools/architecture_doc.py).
source "$(dirname "$0")/script_help.sh" "$@"
set -uo pipefail
cd "$(dirname "$0")/.."

architecture_status=0
/usr/bin/python3 tools/architecture_doc.py --check || architecture_status=1

probes=()
cleanup() { for dir in "${probes[@]}"; do rm -rf "$dir"; done; }
trap cleanup EXIT

# probe <package dir> <dependency> <rule>: a cc_library in <package dir>
# depending on <dependency>.
declare -a rules
probe() {
  local dir=$1/layering_probe dep=$2
  probes+=("$dir")
  mkdir -p "$dir"
  cat > "$dir/BUILD.bazel" <<BUILD
# Written by tools/layering_check.sh; removed when it ends.
cc_library(
    name = "probe",
    deps = ["$dep"],
)
BUILD
  rules+=("//$dir:probe|$dep|$3")
}

probe rdma "//third_party/system:torch" "rdma/ does not use LibTorch (outside rdma/torch)"
probe graph_analyzer "//third_party/system:torch" "graph_analyzer/ does not use LibTorch"
probe onesided "//third_party/system:torch" "onesided/ does not use LibTorch"
probe runtime "//strategies:strategy" "runtime/ does not use strategies/"
probe runtime "//collectives:ring_allreduce" "runtime/ does not use collectives/"
probe collectives "//runtime:communicator" "collectives/ does not use runtime/"
probe compression "//third_party/system:torch" "compression/ does not use LibTorch"
probe collectives "//compression:codec" "collectives/ does not use compression/"
probe runtime "//compression:codec" "runtime/ does not use compression/"
probe strategies "//rdma/ucx:ucx_transport" "strategies/ reach UCX only through the registry"
probe strategies "//rdma/ibverbs:ibverbs_transport" "strategies/ reach verbs only through the registry"
probe strategies "//rdma/loopback:loopback_transport" "strategies/ reach loopback only through the registry"
probe train "//bench:pingpong" "train/ does not use bench/"
probe onesided "//runtime:communicator" "onesided/ does not use runtime/"
probe rdma "//third_party/system:cudart" "only device/cuda uses the CUDA runtime"
probe device "//third_party/system:torch" "device/ does not use LibTorch"
# Keeps to the rules: must analyse, or the probes prove nothing.
mkdir -p strategies/layering_control
probes+=(strategies/layering_control)
cat > strategies/layering_control/BUILD.bazel <<'BUILD'
cc_library(
    name = "probe",
    deps = ["//rdma:builtin_transports"],
)
BUILD

status=0
if ! bazel build --nobuild //strategies/layering_control:probe >/dev/null 2>&1; then
  echo "layering: the control probe (strategies/ -> //rdma:builtin_transports) does not analyse:"
  bazel build --nobuild //strategies/layering_control:probe 2>&1 | grep -E 'ERROR' | head -5
  exit 1
fi
enforced=0
for rule in "${rules[@]}"; do
  IFS='|' read -r target dep what <<<"$rule"
  out=$(bazel build --nobuild "$target" 2>&1)
  if grep -q "is not visible from target" <<<"$out"; then
    enforced=$((enforced + 1))
  else
    echo "layering: NOT ENFORCED: $what ($target -> $dep)"
    grep -E 'ERROR' <<<"$out" | head -3
    status=1
  fi
done
[ "$architecture_status" -eq 0 ] || status=1
echo "layering: ${enforced} of ${#rules[@]} rules enforced by visibility$(
  [ "$architecture_status" -eq 0 ] || echo "; docs/architecture.md's package table is stale")"
exit "$status"
