#!/usr/bin/env bash
# On the GPU machine (decoding speed): checks and timings of one staged build in one call.
# Here: `bash scripts/gpu/gpu_stage.sh`, copy .device/gpu.tgz and this script to DIR (carried);
# there, from the repository root: `bash DIR/decode_speed_check.sh DIR`. Logs to $OUT:
# step_test.log (every Mesa step variant vs the CPU step, graph replay), backend_test.log (every
# backend op and the model vs the CPU; CUDA decoding = full forward = CPU decoding), step_bench.log (one step per layer at MesaNet-small's
# 14 x 6 heads, every variant), decode_bench*.log (the model, fixed and tolerance CG).
set -uo pipefail
dir=${1:?staging folder}
out=${OUT:-/tmp/decode_speed}
mkdir -p "$out" /tmp/x
tar xzf "$dir/gpu.tgz" -C /tmp/x
source scripts/gpu/gpu_jobs.sh
use_device_libs /tmp/x/bin
b=/tmp/x/bin
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$out/device.txt"
status=0
timeout 90 $b/step_cuda_test > "$out/step_test.log" 2>&1 || status=1
grep -E "^\[  (PASSED|FAILED) |FAILED|variant|identical" "$out/step_test.log" | head -30
timeout 180 $b/cuda_backend_test > "$out/backend_test.log" 2>&1 || status=1
grep -E "^\[  (PASSED|FAILED) |FAILED|decoded vs|recorded tolerance|BiasGates|SwiGluRows|GateProjections" "$out/backend_test.log" | head -30
timeout 120 $b/decode_step_cuda_bench --layers 14 --heads 6 > "$out/step_bench.log" 2>&1 || status=1
grep -E "B=|SMs" "$out/step_bench.log"
timeout 200 $b/decode_bench --device cuda --batches 1,64 --contexts 1024,8192,32768 --steps 64 \
  > "$out/decode_bench.log" 2>&1 || status=1
timeout 120 $b/decode_bench --device cuda --batches 1,64 --contexts 1024,32768 --steps 64 --cg_tol 1e-4 \
  > "$out/decode_bench_tol.log" 2>&1 || status=1
timeout 60 $b/decode_bench --device cuda --mixer gated_deltanet --batches 1,64 --contexts 1024 \
  --steps 64 > "$out/decode_bench_gdn.log" 2>&1 || status=1
grep BENCH "$out/decode_bench.log" "$out/decode_bench_tol.log" "$out/decode_bench_gdn.log"
exit $status
