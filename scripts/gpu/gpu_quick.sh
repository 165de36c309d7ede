#!/usr/bin/env bash
# The shortest useful GPU measurement (one GPU, about 2 minutes), for when device time is scarce:
# the MesaNet-small training step of the CUDA backend with bf16 activations (per-op profile and
# GEMM table), mesa-train on one GPU through the real trainer (tokens/s), then the CUDA-vs-CPU
# backend test. Each part writes its log to $OUT as it goes, so a run cut short still reports.
#   here:  bash scripts/gpu/gpu_stage.sh    there (carry .device):  bash scripts/gpu/gpu_quick.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/gpu_quick}
mkdir -p "$out"
if [ -f .device/gpu.tgz ] && [ ! -d .device/bin ]; then tar xzf .device/gpu.tgz -C .device; fi
export LD_LIBRARY_PATH="$(realpath .device/lib):/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
date -u

echo "== bench: MesaNet-small step, bf16 activations"
timeout 150 .device/bin/cuda_backend_bench --activations bf16 --steps "${STEPS:-5}" --profile \
  --gemm_reps 5 > "$out/bench_bf16.log" 2>&1
echo "bench rc=$?"
grep -E '^(step|BENCH)' "$out/bench_bf16.log"
sed -n '/^PROFILE/,/^total/p' "$out/bench_bf16.log" | head -40
sed -n '/fwd_TF/,$p' "$out/bench_bf16.log"

echo "== mesa-train, one GPU (synthetic GPT-2 tokens)"
data=$(realpath "$out")/data
python3 scripts/synthetic_shards.py "$data" 1500000 100000
source scripts/gpu/gpu_jobs.sh
small_job "$data" "$out/ckpt" 8 0 "${TRAIN_STEPS:-40}" "$out/one.yaml"
rm -rf "$out/ckpt" "$out/one.jsonl"
timeout 120 .device/bin/mesa-train --config "$out/one.yaml" --workdir "$out/one" --device cuda \
  --events_file "$out/one.jsonl" > "$out/one.log" 2>&1
echo "mesa-train rc=$?"
tail -3 "$out/one.log"
python3 - "$out/one.jsonl" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
start = [e["start"] for e in ev if "start" in e]
if start: print("start:", {k: start[0].get(k) for k in ("device", "activations", "precision", "parameters")})
loss = [(int(e["step"]["step"]), round(e["step"]["loss"], 3)) for e in ev
        if "step" in e and not e["step"]["skipped"]]
print("losses:", loss[:3], "...", loss[-2:])
PY
echo "mesa-train tokens/s (mean of step events after step 10): $(mean_tokens_per_second "$out/one.jsonl")"

echo "== CUDA backend test (CUDA vs CPU, fp32 and bf16 activations)"
timeout 120 .device/bin/cuda_backend_test > "$out/test.log" 2>&1
echo "test rc=$?"
grep -E '^\[  (PASSED|FAILED)' "$out/test.log"
echo "OPCHECK lines: $(grep -c '^OPCHECK' "$out/test.log"), not ok: $(grep '^OPCHECK' "$out/test.log" | grep -vc ' ok$')"
grep '^OPCHECK' "$out/test.log" | grep -E 'Model|Train' | head -30
