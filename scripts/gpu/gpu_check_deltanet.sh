#!/usr/bin/env bash
# On the GPU machine: the DeltaNet-family CUDA kernels (staged here by scripts/gpu/gpu_stage.sh):
# the op's GPU test, the CUDA backend's DeltaNet tests (op and [deltanet, mesa] model vs CPU), the
# op benchmark, MesaNet-small training throughput per mixer, and FLA's Triton kernels on the same
# card when .fla/ was carried (bench/fla_deltanet_bench.py). Summary table last.
# Usage: bash scripts/gpu/gpu_check_deltanet.sh [BIN_DIR=.device/bin]
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-.device/bin}
out=${OUT:-/tmp/gpu_check}/deltanet
mkdir -p "$out"
source scripts/gpu/gpu_jobs.sh
use_device_libs "$bin"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
status=0
run() {  # name, command...
  local name=$1
  shift
  echo "== $name"
  timeout "${STEP_TIMEOUT:-300}" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  tail -n "${TAIL:-25}" "$out/$name.log"
  echo "-- $name rc=$rc"
  [ $rc -ne 0 ] && status=1
  summary+=$'\n'"$name rc=$rc"
}
summary=""
run deltanet_cuda_test "$bin/deltanet_cuda_test"
[ "${MESA_TEST:-1}" = 1 ] && run mesa_cuda_test "$bin/mesa_cuda_test"
[ "${BACKEND_TEST:-1}" = 1 ] && run cuda_backend_deltanet "$bin/cuda_backend_test" --gtest_filter='*DeltaNet*'
run deltanet_cuda_bench "$bin/deltanet_cuda_bench" --reps "${BENCH_REPS:-30}"
run deltanet_cuda_bench_recompute env MESA_BENCH_RECOMPUTE=1 "$bin/deltanet_cuda_bench" --reps "${BENCH_REPS:-30}"
# NCU=1: per-kernel GPU time of one forward and one backward of each op (ncu, clocks as found).
if [ "${NCU:-0}" = 1 ]; then
  ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
  if [ -n "$ncu_bin" ]; then
    run ncu "$ncu_bin" --clock-control none --metrics gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread \
      --launch-skip 0 --launch-count 40 "$bin/deltanet_cuda_bench" --reps 1
    grep -E "Kernel|gpu__time_duration|warps_active|registers" "$out/ncu.log" | sed 's/  */ /g' | head -120
  fi
fi
for mixer in ${MIXERS:-mesa deltanet gated_deltanet}; do
  run "model_bench_$mixer" "$bin/cuda_backend_bench" --mixer "$mixer" --steps 6 --no_gemm_table
done
if [ -d .fla/fla ] && [ "${FLA:-1}" = 1 ]; then
  # FLA's Triton autotuning takes minutes on a fresh machine (the gated kernels most).
  STEP_TIMEOUT=${FLA_TIMEOUT:-420} run fla_bench python3 bench/fla_deltanet_bench.py
fi
echo
echo "================ summary ================"
echo "$summary"
grep -h "^RESULT\|FLA_RESULT" "$out"/*.log
grep -h "tokens_per_s\|BENCH mixer" "$out"/model_bench_*.log
grep -h " vs f64:\| vs cpu:\|bf16 device" "$out/deltanet_cuda_test.log" | head -30
exit $status
