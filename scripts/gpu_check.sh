#!/usr/bin/env bash
# On the GPU machine: runs the staged CUDA tests and benchmark (built here by
# scripts/gpu_stage.sh, no Bazel needed there) and prints a summary table at the end.
# Usage: bash scripts/gpu_check.sh [BIN_DIR=.device/bin] ; env BENCH_REPS (default 20).
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:-.device/bin}
lib=$(dirname "$bin")/lib
out=${OUT:-/tmp/gpu_check}
mkdir -p "$out"
export LD_LIBRARY_PATH="$(realpath "$lib"):/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# CUDA libraries the binaries name but this image may keep elsewhere (e.g. pip's nvidia-*).
missing=$(ldd "$bin"/* 2>/dev/null | awk '/not found/ {print $1}' | sort -u)
for m in $missing; do
  f=$(find / -xdev -name "$m" -print -quit 2>/dev/null)
  [ -n "$f" ] && export LD_LIBRARY_PATH="$(dirname "$f"):$LD_LIBRARY_PATH"
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
ldd "$bin"/* | grep "not found" && echo "WARNING: unresolved libraries"

status=0
echo "== mesa_cuda_test"
"$bin/mesa_cuda_test" 2>&1 | tee "$out/test.log"
test_rc=${PIPESTATUS[0]}
[ "$test_rc" -ne 0 ] && status=1
echo "== mesa_cuda_bench"
"$bin/mesa_cuda_bench" --reps "${BENCH_REPS:-20}" 2>&1 | tee "$out/bench.log"
bench_rc=${PIPESTATUS[0]}
[ "$bench_rc" -ne 0 ] && status=1

echo
echo "================ summary ================"
echo "test: rc=$test_rc  $(grep -E '^(PASSED|FAILED)' "$out/test.log" | tail -1)"
grep -E 'FAIL' "$out/test.log" | head -20
printf '%-6s %-32s %-10s %-10s %-10s %-12s\n' case shape fwd_ms bwd_ms both_ms TFLOPs_both
grep '^RESULT' "$out/bench.log" | awk -F'|' '{
  s=$1; sub(/^RESULT /,"",s);
  match($2,/fwd [0-9.]+/); f=substr($2,RSTART+4,RLENGTH-4);
  match($3,/bwd [0-9.]+/); b=substr($3,RSTART+4,RLENGTH-4);
  match($4,/fwd\+bwd [0-9.]+/); fb=substr($4,RSTART+8,RLENGTH-8);
  match($4,/\([0-9]+ TFLOP/); tf=substr($4,RSTART+1,RLENGTH-7);
  printf "%-6d %-32s %-10s %-10s %-10s %-12s\n", NR, s, f, b, fb, tf }'
echo "bench: rc=$bench_rc"
exit $status
