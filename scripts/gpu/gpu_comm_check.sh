#!/usr/bin/env bash
# NCCL data-parallel checks for a machine with 2+ GPUs (not run in CI).
#
#   bash scripts/gpu/gpu_stage.sh            # here (no GPU): build and stage every GPU binary
#   bash scripts/gpu/gpu_comm_check.sh run   # on the GPU machine, from the repository root, with
#                                            # .device carried (scripts/gpu/gpu_check.sh calls
#                                            # this when the machine has 2+ GPUs)
#
# `run` does, in order:
#   1. nccl_communicator_gpu_test: mpirun -np 2 comm_check_cuda --device=cuda: every collective on
#      device buffers against a host reference on fresh random data, a rank that exits early, a
#      rank that hangs (the watchdog aborts the communicator; bounded);
#   2. nccl_allreduce_bench under mpirun -np 2: our all-reduce bus bandwidth, queued (like
#      nccl-tests) and blocking (as the trainer calls it), 1 MiB .. 1 GiB;
#   3. mesa-train, MesaNet-small (examples/train_small_gpu.yaml, B8 x T2048 per GPU, synthetic
#      tokens): 1 GPU vs mpirun -np 2 (plain with the gradient all-reduce overlapped with the
#      backward, the default 25 MiB buckets; plain with MESA_GRAD_BUCKET_MB=0, one blocking
#      all-reduce after the backward; ZeRO-1): tokens/s, scaling (target >= 1.85x), overlap vs
#      blocking, AdamW state per rank; plus a short 2-GPU vs 1-GPU loss comparison at the same
#      global batch;
#   4. NCCL's own all_reduce_perf (nccl-tests) on the same machine when it is on PATH or
#      $NCCL_TESTS_DIR, and NCCL's all-reduce through PyTorch (bench/nccl_reference_allreduce.py,
#      always: PyTorch is on the GPU machines), for the comparison docs/PERFORMANCE.md asks for.
# Results go to $OUT (default /tmp/gpu_check/comm); the summary is printed at the end.
set -uo pipefail
cd "$(dirname "$0")/../.."
[ "${1:-}" = "run" ] || { echo "usage: $0 run [STAGE_DIR=.device]" >&2; exit 2; }
stage=${2:-.device}
# Synthetic token shards (llm.c .bin, uint16, GPT-2 vocabulary) for the throughput runs: the data's
# content does not matter for tokens/s. Made here: random tokens do not compress, so they would
# only weigh down what travels to the GPU machine.
if [ ! -f "$stage/data/train_000.bin" ]; then
  python3 scripts/synthetic_shards.py "$stage/data" 4000000 200000
fi
out=${OUT:-/tmp/gpu_check/comm}
mkdir -p "$out"
# A second run on a warm machine must not resume from the first run's checkpoints, nor read its
# events (the trainer appends to --events_file).
rm -rf "$out"/ckpt-* "$out"/one "$out"/two "$out"/two_blocking "$out"/two_zero "$out"/eq1 "$out"/eq2 \
  "$out"/*.jsonl
export LD_LIBRARY_PATH="$(realpath "$stage/lib"):/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader || true
nvidia-smi topo -m 2>/dev/null | head -5 || true
[ "$ngpu" -ge 2 ] || echo "WARNING: $ngpu GPU(s) visible; these checks need 2"
mpi=(mpirun -np 2 --oversubscribe --allow-run-as-root --bind-to none
     -x LD_LIBRARY_PATH -x NCCL_DEBUG -x MESA_COLLECTIVE_TIMEOUT_S)
status=0

echo "== nccl_communicator_gpu_test"
MPIRUN=$(command -v mpirun) "$stage/bin/nccl_communicator_gpu_test" \
  "$stage/bin/comm_check_cuda" --device=cuda 2>&1 | tee "$out/test.log"
test_rc=${PIPESTATUS[0]}
[ "$test_rc" -ne 0 ] && status=1

echo "== nccl_allreduce_bench (2 ranks)"
"${mpi[@]}" "$stage/bin/nccl_allreduce_bench" --iters "${BENCH_ITERS:-20}" 2>&1 | tee "$out/bench.log"
bench_rc=${PIPESTATUS[0]}
[ "$bench_rc" -ne 0 ] && status=1

echo "== mesa-train data parallel: 1 GPU vs 2 GPUs"
# small GLOBAL_BATCH ZERO_STAGE STEPS FILE: MesaNet-small on the synthetic shards.
source scripts/gpu/gpu_jobs.sh
data_dir=$(realpath "$stage/data")
small() { small_job "$data_dir" "$out/ckpt-$(basename "$4" .yaml)" "$1" "$2" "$3" "$4"; }
train_rc=0
small 8 0 40 "$out/one.yaml"
small 16 0 40 "$out/two.yaml"
small 16 0 40 "$out/two_blocking.yaml"
small 16 1 40 "$out/two_zero.yaml"
"$stage/bin/mesa-train" --config "$out/one.yaml" --workdir "$out/one" --device cuda \
  --events_file "$out/one.jsonl" > "$out/one.log" 2>&1 || train_rc=1
for j in two two_blocking two_zero; do
  # two: overlapped all-reduce, default buckets; two_blocking: MESA_GRAD_BUCKET_MB=0.
  bucket="-u MESA_GRAD_BUCKET_MB"
  [ "$j" = two_blocking ] && bucket="MESA_GRAD_BUCKET_MB=0"
  "${mpi[@]}" sh -c "exec env $bucket $stage/bin/mesa-train --config $out/$j.yaml --workdir $out/$j \
    --device cuda --events_file $out/$j.rank\$OMPI_COMM_WORLD_RANK.jsonl" > "$out/$j.log" 2>&1 ||
    train_rc=1
done
# Equivalence at the same global batch (bf16 activations: compare with a loose tolerance).
small 8 0 10 "$out/eq1.yaml"
sed -i 's/log_interval: 5/log_interval: 1/' "$out/eq1.yaml"  # a loss for every step
"$stage/bin/mesa-train" --config "$out/eq1.yaml" --workdir "$out/eq1" --device cuda \
  --events_file "$out/eq1.jsonl" > "$out/eq1.log" 2>&1 || train_rc=1
# Its own checkpoint dir: with eq1's, the 2-GPU run would resume from eq1's final step.
small 8 0 10 "$out/eq2.yaml"
sed -i 's/log_interval: 5/log_interval: 1/' "$out/eq2.yaml"
"${mpi[@]}" sh -c "exec $stage/bin/mesa-train --config $out/eq2.yaml --workdir $out/eq2 --device cuda \
  --events_file $out/eq2.rank\$OMPI_COMM_WORLD_RANK.jsonl" > "$out/eq2.log" 2>&1 || train_rc=1
[ "$train_rc" -ne 0 ] && status=1

perf=$(command -v all_reduce_perf || true)
[ -z "$perf" ] && [ -n "${NCCL_TESTS_DIR:-}" ] && perf="$NCCL_TESTS_DIR/all_reduce_perf"
if [ -n "$perf" ] && [ -x "$perf" ]; then
  echo "== nccl-tests all_reduce_perf (2 GPUs, one process)"
  "$perf" -b 1M -e 1G -f 2 -g 2 -n "${BENCH_ITERS:-20}" 2>&1 | tee "$out/nccl_tests.log"
else
  echo "== nccl-tests all_reduce_perf not found (set NCCL_TESTS_DIR); skipped" | tee "$out/nccl_tests.log"
fi
# NCCL's own all-reduce without our code: torch.distributed's NCCL backend, measured the same way
# (PyTorch is on the GPU machines; nccl-tests is not).
echo "== NCCL all-reduce through PyTorch (reference, 2 GPUs)"
timeout 300 python3 bench/nccl_reference_allreduce.py --gpus 2 --iters "${BENCH_ITERS:-20}" 2>&1 |
  tee "$out/torch_nccl.log"

echo
echo "================ summary ================"
echo "gpu test: rc=$test_rc  $(grep -E '^\[  (PASSED|FAILED)' "$out/test.log" | tr '\n' ' ')"
printf '%-12s %-10s %-12s %-18s %-10s\n' bytes time_us busbw_GBs blocking_busbw_GBs enqueue_us
grep '^RESULT allreduce' "$out/bench.log" | sed -E 's/.*bytes=([0-9]+).*time_us=([0-9.]+).*[^_]busbw_GBs=([0-9.]+).*blocking_busbw_GBs=([0-9.]+).*enqueue_us=([0-9.]+).*/\1 \2 \3 \4 \5/' |
  awk '{printf "%-12s %-10s %-12s %-18s %-10s\n", $1, $2, $3, $4, $5}'
echo "bench: rc=$bench_rc"
grep -E '^ +[0-9]+ +[0-9]+ +float' "$out/nccl_tests.log" | awk '{print "nccl-tests", $1, "bytes busbw(out-of-place)", $8, "busbw(in-place)", $12}' || true
echo "ours vs NCCL through PyTorch (busbw GB/s, queued):"
python3 - "$out/bench.log" "$out/torch_nccl.log" <<'PY' || true
import re, sys
def table(path, tag):
    rows = {}
    for line in open(path):
        if line.startswith("RESULT " + tag):
            f = dict(kv.split("=") for kv in line.split()[2:])
            rows[int(f["bytes"])] = float(f["busbw_GBs"])
    return rows
ours, ref = table(sys.argv[1], "allreduce"), table(sys.argv[2], "torch_nccl_allreduce")
for size in sorted(set(ours) & set(ref)):
    print("  %11d bytes: ours %7.1f  NCCL/PyTorch %7.1f  (%.0f %%)" % (size, ours[size], ref[size], 100 * ours[size] / ref[size]))
if not ref: print("  no PyTorch reference figures (see torch_nccl.log)")
PY
one=$(mean_tokens_per_second "$out/one.jsonl" 2>/dev/null); two=$(mean_tokens_per_second "$out/two.rank0.jsonl" 2>/dev/null)
twoz=$(mean_tokens_per_second "$out/two_zero.rank0.jsonl" 2>/dev/null)
twob=$(mean_tokens_per_second "$out/two_blocking.rank0.jsonl" 2>/dev/null)
echo "mesa-train rc=$train_rc  tokens/s: 1 GPU $one | 2 GPUs $two (per-GPU batch 8) | 2 GPUs ZeRO-1 $twoz"
echo "2 GPUs gradient all-reduce: overlapped with the backward $two tokens/s | blocking (MESA_GRAD_BUCKET_MB=0) $twob tokens/s"
python3 -c "print('scaling 2 vs 1: %.3fx (target >= 1.85x)' % (float('$two') / float('$one')))" 2>/dev/null || true
python3 -c "print('scaling 2 vs 1, blocking all-reduce: %.3fx; overlap vs blocking: %.3fx' % (float('$twob') / float('$one'), float('$two') / float('$twob')))" 2>/dev/null || true
for f in "$out/two.rank0.jsonl" "$out/two_blocking.rank0.jsonl" "$out/two_zero.rank0.jsonl"; do
  grep -o '"optimizer_state_bytes":"[0-9]*"\|"activations":"[a-z0-9]*"\|"grad_overlap":[a-z]*\|"grad_bucket_bytes":"[0-9]*"' \
    "$f" 2>/dev/null | head -4 | tr '\n' ' ' | sed "s|^|$(basename "$f"): |"
  echo
done
python3 - "$out/eq1.jsonl" "$out/eq2.rank0.jsonl" <<'PY' || status=1
import json, sys
def losses(p): return {int(e["step"]["step"]): e["step"]["loss"] for e in map(json.loads, open(p)) if "step" in e and not e["step"]["skipped"]}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
worst = max(abs(a[k] - b[k]) / abs(a[k]) for k in a)
print("2 GPUs vs 1 GPU, same global batch: %d steps, worst relative loss difference %.2e" % (len(a), worst))
assert a.keys() == b.keys() and worst < 2e-2
PY
exit $status
