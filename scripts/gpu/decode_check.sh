#!/usr/bin/env bash
# On the GPU machine, from the folder decode_stage.sh packed: the decoding-step kernels against
# their CPU counterparts and from a CUDA graph (step_cuda_test), then one step of MesaNet-small's
# mixers per layer at B = 1 and 64 (decode_step_cuda_bench). Logs to $OUT/{test,bench}.log.
set -uo pipefail
cd "$(dirname "$0")"
out=${OUT:-/tmp/decode_check}
mkdir -p "$out"
source ./gpu_jobs.sh
use_device_libs bin
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
status=0
timeout 60 bin/step_cuda_test > "$out/test.log" 2>&1 || status=1
grep -E "^\[  (PASSED|FAILED|  OK) |FAILED|Failure|worst|identical|differ|error" "$out/test.log" | head -60
timeout 100 bin/decode_step_cuda_bench "$@" > "$out/bench.log" 2>&1 || status=1
cat "$out/bench.log"
exit $status
