#!/usr/bin/env bash
# On the GPU machine: the Mesa kernels' GPU test and benchmark, then the decoding steps' (staged here by
# scripts/gpu/gpu_stage.sh; scripts/gpu/gpu_check.sh runs this among the other GPU checks). Prints a
# summary table at the end.
# Usage: bash scripts/gpu/gpu_check_kernels.sh [BIN_DIR=.device/bin] ; env BENCH_REPS (default 20).
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-.device/bin}
out=${OUT:-/tmp/gpu_check/kernels}
mkdir -p "$out"
source scripts/gpu/gpu_jobs.sh
use_device_libs "$bin"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
ldd "$bin"/* | grep "not found" && echo "WARNING: unresolved libraries"

# CHECK_VARIANTS: space-separated environment settings, one variant each ('plain' = no setting), e.g.
#   CHECK_VARIANTS="plain MESA_CUDA_NO_WGMMA=1"  (use '+' to join several settings in one variant:
#   MESA_CUDA_NO_WGMMA=1+MESA_CUDA_OCC=1). Switches: MESA_CUDA_NO_WGMMA=1 (mma.sync CG fallback, what sm_80
#   runs), MESA_CUDA_OCC=1 (occupancy/register/spill lines), MESA_BENCH_RECOMPUTE=1 (bench: backward
#   recomputes the chunk states). Each variant runs the test and the benchmark; unset = one plain run.
#   CHECK_TEST_VARIANTS (default: all) limits which variants run the test.
variants=${CHECK_VARIANTS:-plain}
test_variants=${CHECK_TEST_VARIANTS:-$variants}
status=0
summary=""
for var in $variants; do
  envs=()
  [ "$var" != plain ] && IFS='+' read -r -a envs <<<"$var"
  tag=${var//[^A-Za-z0-9_.-]/_}  # file names that the device tool returns: no '='
  test_rc=skipped
  if [[ " $test_variants " == *" $var "* ]]; then
    echo "== mesa_cuda_test [$var]"
    env "${envs[@]}" "$bin/mesa_cuda_test" 2>&1 | tee "$out/test_$tag.log"
    test_rc=${PIPESTATUS[0]}
    [ "$test_rc" -ne 0 ] && status=1
  fi
  echo "== mesa_cuda_bench [$var]"
  env "${envs[@]}" "$bin/mesa_cuda_bench" --reps "${BENCH_REPS:-20}" 2>&1 | tee "$out/bench_$tag.log"
  bench_rc=${PIPESTATUS[0]}
  [ "$bench_rc" -ne 0 ] && status=1
  summary+=$'\n'"---- variant [$var]: test rc=$test_rc"
  [ -f "$out/test_$tag.log" ] && summary+="  $(grep -E '^(PASSED|FAILED)' "$out/test_$tag.log" | tail -1)"$'\n'"$(grep -E 'FAIL' "$out/test_$tag.log" | head -20)"
  summary+=$'\n'"$(grep '^OCC' "$out/bench_$tag.log" | sort -u)"
  summary+=$'\n'"$(printf '%-6s %-32s %-10s %-10s %-10s %-12s' case shape fwd_ms bwd_ms both_ms TFLOPs_both)"
  summary+=$'\n'"$(grep '^RESULT' "$out/bench_$tag.log" | awk -F'|' '{
    s=$1; sub(/^RESULT /,"",s);
    match($2,/fwd [0-9.]+/); f=substr($2,RSTART+4,RLENGTH-4);
    match($3,/bwd [0-9.]+/); b=substr($3,RSTART+4,RLENGTH-4);
    match($4,/fwd\+bwd [0-9.]+/); fb=substr($4,RSTART+8,RLENGTH-8);
    match($4,/\([0-9]+ TFLOP/); tf=substr($4,RSTART+1,RLENGTH-7);
    printf "%-6d %-32s %-10s %-10s %-10s %-12s\n", NR, s, f, b, fb, tf }')"
  summary+=$'\n'"bench: rc=$bench_rc"
done

# The single-token decoding steps (kernels/mesa/cuda/NOTES.md, "Decoding steps"), when staged.
if [ -x "$bin/step_cuda_test" ]; then
  echo "== step_cuda_test"
  "$bin/step_cuda_test" 2>&1 | tee "$out/step_test.log"
  step_rc=${PIPESTATUS[0]}
  [ "$step_rc" -ne 0 ] && status=1
  summary+=$'\n'"---- decoding steps: test rc=$step_rc"$'\n'"$(grep -E 'worst|identical|FAILED' "$out/step_test.log")"
fi
if [ -x "$bin/decode_step_cuda_bench" ]; then
  echo "== decode_step_cuda_bench"
  "$bin/decode_step_cuda_bench" 2>&1 | tee "$out/step_bench.log"
  [ "${PIPESTATUS[0]}" -ne 0 ] && status=1
  summary+=$'\n'"$(grep -E '^B=' "$out/step_bench.log" | grep -v variant)"
fi

echo
echo "================ summary ================"
echo "$summary"
exit $status
