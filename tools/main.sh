#!/usr/bin/env bash
# The main job: set up, build optimized, and run over UCX shared memory
#  1. the write/read ping-pong between two processes, next to memcpy;
#  2. the RPC-vs-RDMA ablation: training graphs' communication replayed
#     between processes through the zero-copy runtime, the rdma_copy and the
#     gRPC baselines, and a single-tensor sweep next to memcpy;
#  3. a training run: rdmaflow_train, 1 parameter server + 2 workers as
#     processes, LeNet-5 on Fashion-MNIST (BSP, zero copy, one-sided pulls);
#  4. the parameter server's RPC-vs-RDMA comparison: the VGG-like net's step
#     time over rdma, rdma_copy and grpc (tools/bench_ps.sh, comm part);
#  5. the ring all-reduce next to Gloo and Open MPI, 2 and 4
#     ranks, 4 KiB to 16 MiB (tools/bench_allreduce.sh), and a short
#     data-parallel training run on it (3 replicas of LeNet-5);
# then plan the example training graphs with `rdmaflow plan`, and a PyTorch
# model (a ResNet-18-like CNN saved as TorchScript) for each strategy.
# Prints the tables; JSON, TSV, plots, the plans and DOT go to $OUT_DIR.
# Arguments are passed on to transport_pingpong (e.g. --max_bytes=1048576).
# Environment: OUT_DIR (default bench-results); COMM_STEPS, the parameter
# server comparison's steps (default 10); ALLREDUCE_MAX_BYTES, the
# all-reduce sweep's largest size (default 16777216).
source "$(dirname "$0")/script_help.sh" "$@"
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh

OUT_DIR=${OUT_DIR:-bench-results}
mkdir -p "$OUT_DIR"
bazel build -c opt //bench:transport_pingpong //bench:ablation //cli:rdmaflow \
  //train:rdmaflow_train
bazel-bin/bench/transport_pingpong --transport=ucx --params=tls=shm \
  --json="$OUT_DIR/pingpong_ucx_shm.json" --tsv="$OUT_DIR/pingpong_ucx_shm.tsv" "$@"
tools/plot_pingpong.sh "$OUT_DIR/pingpong_ucx_shm.tsv" "$OUT_DIR/pingpong_ucx_shm.png"

echo
bazel-bin/bench/ablation --transport=ucx --params=tls=shm \
  --json="$OUT_DIR/ablation.json" --tsv="$OUT_DIR/ablation" \
  --trace_dir="$OUT_DIR"
tools/plot_ablation.sh "$OUT_DIR/ablation" "$OUT_DIR/ablation.png"

echo
bazel-bin/train/rdmaflow_train --local 3 --model lenet5 --sync bsp --steps 300 \
  --eval_every 50 --log_prefix "$OUT_DIR/train_lenet5" \
  --json "$OUT_DIR/train_lenet5.json"

echo
PARTS=comm COMM_STEPS=${COMM_STEPS:-10} tools/bench_ps.sh "$OUT_DIR/ps"

echo
MAX_BYTES=${ALLREDUCE_MAX_BYTES:-16777216} tools/bench_allreduce.sh "$OUT_DIR/allreduce"
echo
bazel-bin/train/rdmaflow_train --local 3 --model lenet5 --strategy allreduce \
  --steps 200 --json "$OUT_DIR/train_allreduce.json"

echo
# The c10d backend as a drop-in: the same DDP script over rdmaflow and Gloo.
for backend in rdmaflow gloo; do
  RDMAFLOW_TRANSPORT_PARAMS=tls=shm tools/torchrun.sh --nproc_per_node=2 \
    examples/torch/ddp_fashion_mnist.py \
    --backend "$backend" --steps 200 --json "$OUT_DIR/ddp_$backend.json" 2>&1 |
    sed -e '/^\*\*\*/d' -e '/OMP_NUM_THREADS/d' -e '/^WARNING:__main__/d'
done

# Transfer plans of the example graphs: the parameter-server CNN in full,
# the others as one line each.
echo
bazel-bin/cli/rdmaflow plan graph_analyzer/testdata/cnn_ps_2workers.pbtxt \
  --out "$OUT_DIR/cnn_ps_2workers.plan.pbtxt" --dot "$OUT_DIR/cnn_ps_2workers.dot"
for graph in mlp_2ranks cnn_layer_separated seq_dynamic_length; do
  bazel-bin/cli/rdmaflow plan "graph_analyzer/testdata/$graph.pbtxt" --quiet \
    --out "$OUT_DIR/$graph.plan.pbtxt"
done
# A PyTorch model brought in (docs/bring_your_model.md): the ResNet-18-like
# test model, saved as TorchScript, planned for each strategy.
echo
"$(tools/torch_python.sh)" graph_analyzer/torch/test_models.py "$OUT_DIR/models" resnet18 \
  export_dynamic:resnet18
for strategy in ps:servers=2,workers=4 allreduce:workers=4 layer_separated:conv=3,fc=1; do
  bazel-bin/cli/rdmaflow plan "$OUT_DIR/models/resnet18.pt" --input 64x1x28x28 \
    --strategy "$strategy" --quiet --out "$OUT_DIR/resnet18_${strategy%%:*}.plan.pbtxt"
done
# The same model through torch.export (a .pt2 with a dynamic batch).
bazel-bin/cli/rdmaflow plan "$OUT_DIR/models/resnet18_dynamic.pt2" --input 64x1x28x28 \
  --strategy ps:servers=2,workers=4 --quiet --out "$OUT_DIR/resnet18_export_ps.plan.pbtxt"
echo "results: $OUT_DIR/pingpong_ucx_shm.{json,tsv,png}, $OUT_DIR/ablation.{json,png}," \
  "$OUT_DIR/*.rdma.rank*.json (Chrome traces), $OUT_DIR/train_lenet5.*," \
  "$OUT_DIR/ps/report.{txt,json}, $OUT_DIR/allreduce/allreduce.{txt,json,png}," \
  "$OUT_DIR/train_allreduce.json, $OUT_DIR/ddp_{rdmaflow,gloo}.json, $OUT_DIR/*.plan.pbtxt"
