#!/usr/bin/env bash
# On the GPU machine: the CUDA model backend's GPU test and benchmarks (staged here by
# scripts/gpu_stage.sh; scripts/gpu_check.sh runs this among the other GPU checks). Prints one table
# at the end. Usage: bash model/backend/cuda/run_device.sh [STAGE_DIR=.device]; logs go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../../.."
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
echo "== bench tf32 (+ GEMM table)"
$root/bin/cuda_backend_bench --gemm tf32 --steps 6 2>&1 | tee "$out/bench_tf32.log"
tf32_rc=${PIPESTATUS[0]}
echo "== bench bf16"
$root/bin/cuda_backend_bench --gemm bf16 --steps 6 --no_gemm_table 2>&1 | tee "$out/bench_bf16.log"
bf16_rc=${PIPESTATUS[0]}

echo
echo "================ CUDA backend summary ================"
echo "test rc=$test_rc  $(grep -E '^\[  (PASSED|FAILED)' "$out/test.log" | tr '\n' ' ')"
printf '%-42s %-14s %-10s %-6s %s\n' check tensor rel_err tol result
grep '^OPCHECK' "$out/test.log" | awk '{printf "%-42s %-14s %-10s %-6s %s\n", $2, $3, $4, $5, $6}'
grep -E 'worst gradient' "$out/test.log"
echo "-- bench (tf32 rc=$tf32_rc, bf16 rc=$bf16_rc)"
grep -E '^BENCH gemm_step' "$out/bench_tf32.log"
for f in tf32 bf16; do
  echo "[$f]"; grep -E '^BENCH (step_ms|wall_step|tokens_per_s|mesa_op|MFU|peak_mem|loss|dense)' "$out/bench_$f.log"
done
