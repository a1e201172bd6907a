#!/usr/bin/env bash
# Two builds of the rdmaflow_torch module side by side: the c10d
# all-reduce's latency through torch.distributed (bench/torch_backend_bench.py
# under torchrun), alternating the builds in every repeat so that both see
# the same machine (figures from separate runs do not compare here). Each
# folder holds an rdmaflow_torch.so (copy bazel-bin/torch_backend/python/
# rdmaflow_torch.so there before and after a change). Prints the median and
# the fastest of each build, path (RDMAFLOW_DIRECT: off = the ring, auto =
# the same-host algorithms), tensor kind (staged, registered) and size.
#   tools/bench_torch_ab.sh BEFORE_DIR AFTER_DIR [OUT]   (default bench-results/torch_ab)
# RANKS (default 2), REPEATS (default 6), SIZES (default 4096,1048576),
# PATHS (default "off auto").
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 BEFORE_DIR AFTER_DIR [OUT] (--help for more)" >&2
  exit 2
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
before=$(cd "$1" && pwd)
after=$(cd "$2" && pwd)
out=${3:-$root/bench-results/torch_ab}
for dir in "$before" "$after"; do
  [ -f "$dir/rdmaflow_torch.so" ] || { echo "no rdmaflow_torch.so in $dir" >&2; exit 2; }
done
mkdir -p "$out"
rm -f "$out"/*.jsonl
cd "$root"
export RDMAFLOW_TRANSPORT_PARAMS=${RDMAFLOW_TRANSPORT_PARAMS:-tls=shm}
export RDMAFLOW_REGISTERED_MB=${RDMAFLOW_REGISTERED_MB:-80}
repeats=${REPEATS:-6}
for repeat in $(seq "$repeats"); do
  for path in ${PATHS:-off auto}; do
    for build in before after; do
      dir=$before
      [ "$build" = after ] && dir=$after
      for kind in staged registered; do
        flags=()
        [ "$kind" = registered ] && flags=(--registered)
        echo "== run $repeat of $repeats: $build, RDMAFLOW_DIRECT=$path, $kind"
        RDMAFLOW_DIRECT=$path RDMAFLOW_TORCH_MODULE_DIR=$dir tools/torchrun.sh \
            --nproc_per_node="${RANKS:-2}" bench/torch_backend_bench.py --backend rdmaflow \
            "${flags[@]}" --sizes "${SIZES:-4096,1048576}" --ddp_steps 0 \
            --label "$build $path $kind" --json "$out/$build.$path.$kind.$repeat.jsonl" \
            >/dev/null 2>"$out/last_stderr.txt" ||
          { cat "$out/last_stderr.txt" >&2; exit 1; }
      done
    done
  done
done
/usr/bin/python3 - "$out" <<'PY' | tee "$out/report.txt"
import collections, glob, json, statistics, sys
runs = collections.defaultdict(list)
for name in glob.glob(sys.argv[1] + "/*.jsonl"):
    for line in open(name):
        r = json.loads(line)
        if r.get("kind") == "allreduce":
            build, path, kind = r["backend"].split()
            runs[(path, kind, r["bytes"], build)].append(r["us"])
print(f"{'path':6} {'tensor':10} {'bytes':>8} {'before us':>10} {'after us':>9} "
      f"{'ratio':>6}  (medians; fastest in brackets)")
for path, kind, size in sorted({k[:3] for k in runs}):
    b, a = runs[(path, kind, size, "before")], runs[(path, kind, size, "after")]
    if not b or not a:
        continue
    mb, ma = statistics.median(b), statistics.median(a)
    print(f"{path:6} {kind:10} {size:8} {mb:10.1f} {ma:9.1f} {mb / ma:6.2f}  "
          f"[{min(b):.1f} / {min(a):.1f}]")
PY
