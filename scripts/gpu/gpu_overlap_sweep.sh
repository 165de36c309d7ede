#!/usr/bin/env bash
# How well the gradient all-reduce hides behind the backward pass on 2 GPUs (not run in CI).
#   here: bash scripts/gpu/gpu_stage.sh   there (2+ GPUs, .device carried):
#   bash scripts/gpu/gpu_overlap_sweep.sh [STAGE_DIR=.device]
# MesaNet-small (examples/train_small_gpu.yaml, 8 x 2048 per GPU, synthetic tokens), STEPS steps
# (default 60), tokens/s averaged over the step events after step 10, for: one GPU; two GPUs with a
# blocking all-reduce after the backward (MESA_GRAD_BUCKET_MB=0); two GPUs overlapped with the
# default 25 MiB buckets; and overlapped variants: the NCCL stream at high priority
# (MESA_NCCL_STREAM_PRIORITY=high), fewer NCCL blocks (NCCL_MAX_CTAS), larger buckets. The first
# two-GPU settings run twice to show the run-to-run spread. Logs and a summary go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
stage=${1:-.device}
if [ -f "$stage/gpu.tgz" ] && [ ! -d "$stage/bin" ]; then tar xzf "$stage/gpu.tgz" -C "$stage"; fi
out=${OUT:-/tmp/gpu_overlap}
mkdir -p "$out"
steps=${STEPS:-60}
export LD_LIBRARY_PATH="$(realpath "$stage/lib"):/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -f "$stage/data/train_000.bin" ] || python3 scripts/synthetic_shards.py "$stage/data" 4000000 200000
source scripts/gpu/gpu_jobs.sh
data_dir=$(realpath "$stage/data")
# run NAME GPUS "ENV=VALUE ...": one mesa-train run; prints NAME and its tokens/s.
run() {
  local name=$1 gpus=$2 envs=$3
  rm -rf "$out/ckpt-$name" "$out/$name" "$out/$name".*jsonl
  small_job "$data_dir" "$out/ckpt-$name" $((8 * gpus)) 0 "$steps" "$out/$name.yaml"
  if [ "$gpus" -eq 1 ]; then
    env $envs "$stage/bin/mesa-train" --config "$out/$name.yaml" --workdir "$out/$name" \
      --device cuda --events_file "$out/$name.rank0.jsonl" > "$out/$name.log" 2>&1
  else
    timeout 180 mpirun -np "$gpus" --oversubscribe --allow-run-as-root --bind-to none \
      -x LD_LIBRARY_PATH sh -c "exec env $envs $stage/bin/mesa-train --config $out/$name.yaml \
      --workdir $out/$name --device cuda --events_file $out/$name.rank\$OMPI_COMM_WORLD_RANK.jsonl" \
      > "$out/$name.log" 2>&1
  fi
  local rc=$?
  local tps
  tps=$(mean_tokens_per_second "$out/$name.rank0.jsonl")
  printf '%-34s rc=%d tokens/s %s  (%s)\n' "$name" "$rc" "$tps" "$envs" |
    tee -a "$out/summary.txt"
}
nvidia-smi --query-gpu=index,name --format=csv,noheader
rm -f "$out/summary.txt"
run one_gpu 1 ""
run blocking_a 2 "MESA_GRAD_BUCKET_MB=0"
run overlap_a 2 ""
run blocking_b 2 "MESA_GRAD_BUCKET_MB=0"
run overlap_b 2 ""
run overlap_high_priority 2 "MESA_NCCL_STREAM_PRIORITY=high"
run overlap_max_ctas_8 2 "NCCL_MAX_CTAS=8"
run overlap_max_ctas_4_high 2 "NCCL_MAX_CTAS=4 MESA_NCCL_STREAM_PRIORITY=high"
run overlap_buckets_100mb 2 "MESA_GRAD_BUCKET_MB=100"
run blocking_max_ctas_8 2 "MESA_GRAD_BUCKET_MB=0 NCCL_MAX_CTAS=8"
echo "================ summary (tokens/s, steps 11-$steps)"
cat "$out/summary.txt"
