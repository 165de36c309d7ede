#!/usr/bin/env bash
# Context parallelism on 2 GPUs (branch `cp`, docs/distributed.md "Context parallelism").
# Run from the repository root on a 2-GPU machine (nvidia-h100-x2), the staged binaries in
# $STAGE (default .device/cp) carried:
#   bash scripts/gpu/gpu_context_parallel.sh
# Needs: $STAGE/gpu.tgz (cuda_backend_test, mesa-train of branch cp, staged with the libraries
# by scripts/gpu/gpu_stage.sh's recipe), main's scripts/synthetic_shards.py, scripts/gpu/gpu_jobs.sh
# and examples/train_small_gpu.yaml. Writes logs and events under $OUT (default /tmp/cp_out).
#   1. cuda_backend_test --gtest_filter=*CausalConv*: the new tail-backward kernel against the CPU;
#   2. equivalence, fp32 activations: a 4-layer hybrid (mesa, gated_deltanet, gla, deltanet) and a
#      4-layer Mesa model, d_model 768, 6 x 128 heads, B2 x T2048, 6 steps: 1 GPU whole sequences
#      vs 2 GPUs with training.context_parallel 2 (NCCL send/recv of the states): per-step losses;
#   3. timing: MesaNet-small (14 layers) on one 65,536-token sequence per step (B1 x T65536, bf16),
#      8 steps: 1 GPU vs 2 GPUs with context_parallel 2: tokens/s (mean of steps 3-8), peak GPU memory.
set -uo pipefail
out=${OUT:-/tmp/cp_out}
mkdir -p "$out" /tmp/x
tar xzf "${STAGE:-.device/cp}/gpu.tgz" -C /tmp/x
source scripts/gpu/gpu_jobs.sh
use_device_libs /tmp/x/bin
B=/tmp/x/bin
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MESA_COLLECTIVE_TIMEOUT_S=300
mpi=(mpirun -np 2 --oversubscribe --allow-run-as-root --bind-to none
     -x LD_LIBRARY_PATH -x NCCL_DEBUG -x MESA_COLLECTIVE_TIMEOUT_S)
date -u; nvidia-smi -L
data=/tmp/cp_data
[ -f "$data/train_000.bin" ] || python3 scripts/synthetic_shards.py "$data" 4000000 200000 > /dev/null

echo "== 1. cuda_backend_test CausalConv*"
timeout 300 "$B/cuda_backend_test" --gtest_filter='*CausalConv*' > "$out/kernel.log" 2>&1
echo "kernel test rc=$?"; grep -E '^\[  (PASSED|FAILED)|FAILED|Failure' "$out/kernel.log" | head -20

# job NAME CP SEQ BATCH STEPS LAYERS MIXERS PRECISION: examples/train_small_gpu.yaml adapted.
job() {
  small_job "$data" "$out/ckpt-$1" "$4" 0 "$5" "$out/$1.yaml"
  sed -i -e "s|seq_len: 2048|seq_len: $3|" -e "s|n_layers: 14|n_layers: $6|" \
         -e "s|  mixer: mesa|  layer_mixers: $7|" -e "s|precision: auto.*|precision: $8|" \
         -e "s|warmup_steps: 10|warmup_steps: 2|" \
         -e "s|log_interval: 5|log_interval: 1\n  context_parallel: $2|" "$out/$1.yaml"
}
one() {  # NAME: 1 GPU
  timeout 600 "$B/mesa-train" --config "$out/$1.yaml" --workdir "$out/$1" --device cuda \
    --events_file "$out/$1.jsonl" > "$out/$1.log" 2>&1; echo "$1 rc=$?"; tail -3 "$out/$1.log"
}
two() {  # NAME: 2 GPUs under mpirun
  timeout 600 "${mpi[@]}" sh -c "exec $B/mesa-train --config $out/$1.yaml --workdir $out/$1 \
    --device cuda --events_file $out/$1.rank\$OMPI_COMM_WORLD_RANK.jsonl" > "$out/$1.log" 2>&1
  echo "$1 rc=$?"; tail -3 "$out/$1.log"
}
memwatch() {  # samples every GPU's used memory into $1 until killed
  while true; do nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits >> "$1"; sleep 0.5; done
}

echo "== 2. equivalence (fp32): 1 GPU vs context_parallel 2 on 2 GPUs"
job hyb1 1 2048 2 6 4 "[mesa, gated_deltanet, gla, deltanet]" fp32
job hyb2 2 2048 2 6 4 "[mesa, gated_deltanet, gla, deltanet]" fp32
job mesa1 1 2048 2 6 4 "[mesa]" fp32
job mesa2 2 2048 2 6 4 "[mesa]" fp32
one hyb1; two hyb2; one mesa1; two mesa2

echo "== 3. timing: MesaNet-small, B1 x T65536, bf16"
job long1 1 65536 1 8 14 "[mesa]" auto
job long2 2 65536 1 8 14 "[mesa]" auto
memwatch "$out/long1.mem" & w=$!; one long1; kill $w
memwatch "$out/long2.mem" & w=$!; two long2; kill $w

echo; echo "================ summary ================"
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def steps(path):
    try:
        return {int(e["step"]["step"]): e["step"] for e in map(json.loads, open(path)) if "step" in e}
    except OSError:
        return {}
for a, b in (("hyb1", "hyb2"), ("mesa1", "mesa2")):
    x, y = steps("%s/%s.jsonl" % (out, a)), steps("%s/%s.rank0.jsonl" % (out, b))
    common = sorted(set(x) & set(y))
    rel = [abs(x[k]["loss"] - y[k]["loss"]) / abs(x[k]["loss"]) for k in common]
    print("%-5s 1 GPU vs CP=2: %d steps, losses %s vs %s, worst relative difference %s" % (
        a[:-1], len(common), [round(x[k]["loss"], 5) for k in common],
        [round(y[k]["loss"], 5) for k in common], "%.2e" % max(rel) if rel else "n/a"))
def tps(path):
    s = steps(path)
    v = [e["tokens_per_second"] for k, e in s.items() if k >= 3 and not e["skipped"]]
    return sum(v) / len(v) if v else float("nan")
def peak(path):
    m = {}
    try:
        for line in open(path):
            i, used = (int(f) for f in line.split(","))
            m[i] = max(m.get(i, 0), used)
    except (OSError, ValueError):
        pass
    return m
t1, t2 = tps(out + "/long1.jsonl"), tps(out + "/long2.rank0.jsonl")
print("MesaNet-small B1 x T65536: 1 GPU %.0f tokens/s, 2 GPUs CP=2 %.0f tokens/s, speed-up %.2fx" %
      (t1, t2, t2 / t1 if t1 == t1 and t1 > 0 else float("nan")))
print("peak GPU memory MiB: 1 GPU %s, 2 GPUs %s" % (peak(out + "/long1.mem"), peak(out + "/long2.mem")))
PY
date -u
