#!/usr/bin/env bash
# On the GPU machine: the CUDA model backend's GPU test and benchmarks (staged here by
# scripts/gpu/gpu_stage.sh; scripts/gpu/gpu_check.sh runs this among the other GPU checks). Prints
# one table at the end. Usage: bash scripts/gpu/run_device.sh [STAGE_DIR=.device]; logs go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=${1:-.device}
out=${OUT:-/tmp/gpu_check/model}
mkdir -p "$out"
export LD_LIBRARY_PATH="$(realpath $root/lib):/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
missing=$(ldd $root/bin/* 2>/dev/null | awk '/not found/ {print $1}' | sort -u)
for m in $missing; do
  f=$(find / -xdev -name "$m" -print -quit 2>/dev/null)
  [ -n "$f" ] && export LD_LIBRARY_PATH="$(dirname "$f"):$LD_LIBRARY_PATH"
done
ldd $root/bin/* | grep "not found" && echo "WARNING: unresolved libraries"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv,noheader
date -u

echo "== factory test"
$root/bin/cuda_backend_factory_test 2>&1 | tail -3
echo "== op + model test"
$root/bin/cuda_backend_test 2>&1 | tee "$out/test.log" | grep -vE '^OPCHECK|^  [a-z_.0-9]+ +grad rel err' 
test_rc=${PIPESTATUS[0]}
echo "== bench bf16 activations (+ GEMM table)"
$root/bin/cuda_backend_bench --activations bf16 --steps ${MODEL_BENCH_STEPS:-6} --profile 2>&1 | tee "$out/bench_bf16.log"
bf16_rc=${PIPESTATUS[0]}
echo "== bench fp32 activations, tf32 GEMMs"
$root/bin/cuda_backend_bench --activations fp32 --gemm tf32 --steps ${MODEL_BENCH_STEPS:-6} --no_gemm_table 2>&1 |
  tee "$out/bench_fp32.log"
fp32_rc=${PIPESTATUS[0]}

echo
echo "================ CUDA backend summary ================"
echo "test rc=$test_rc  $(grep -E '^\[  (PASSED|FAILED)' "$out/test.log" | tr '\n' ' ')"
grep -E '^\[  FAILED' "$out/test.log" | head
printf '%-42s %-14s %-10s %-6s %s\n' check tensor rel_err tol result
grep '^OPCHECK' "$out/test.log" | awk '{printf "%-42s %-14s %-10s %-6s %s\n", $2, $3, $4, $5, $6}' |
  grep -v ' ok$' | head -40
echo "OPCHECK lines: $(grep -c '^OPCHECK' "$out/test.log"), not ok: $(grep '^OPCHECK' "$out/test.log" | grep -vc ' ok$')"
grep -E 'worst gradient|^Model' "$out/test.log" | head -20
echo "-- bench (bf16 rc=$bf16_rc, fp32 rc=$fp32_rc)"
grep -E '^BENCH gemm_step' "$out/bench_bf16.log"
sed -n '/^PROFILE/,/^total/p' "$out/bench_bf16.log" | head -45
for f in bf16 fp32; do
  echo "[$f]"; grep -E '^BENCH (step_ms|wall_step|tokens_per_s|mesa_op|MFU|peak_mem|loss|dense|params)' "$out/bench_$f.log"
done
[ "$test_rc" -eq 0 ] && [ "$bf16_rc" -eq 0 ] && [ "$fp32_rc" -eq 0 ]
