#!/usr/bin/env bash
# On the GPU machine: the attention operator's GPU test, its benchmark (decoding at B 1 / 64 against
# 1k-32k cached tokens; B8 T2048 H16 D128 bf16, global causal and SWA-1024; B2 T8192 and B1 T32768
# next to the Mesa and DeltaNet operators) and PyTorch's SDPA / flex attention at the same shapes. Logs under OUT (default /tmp).
# Usage, from the repository root: bash PATH/gpu_check_attention.sh TGZ|BIN_DIR (TGZ from
# scripts/gpu/gpu_stage_attention.sh, or .device/bin as scripts/gpu/gpu_stage.sh unpacks it;
# attention_sdpa_bench.py is looked for beside this script, so both can travel in a carried folder).
# Environment: SKIP_TEST=1, SKIP_TORCH=1, SKIP_LONG=1 leave those parts out.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=${1:?gpu.tgz or a bin directory}
out=${OUT:-/tmp}
if [ -d "$src" ]; then
  b=$src  # e.g. .device/bin of scripts/gpu/gpu_stage.sh
else
  x=$(mktemp -d)
  tar xzf "$src" -C "$x" || exit 1
  b=$x/bin
fi
source scripts/gpu/gpu_jobs.sh
use_device_libs "$b"
{
  date -u
  [ -f "$b/commit" ] && echo "commit $(tr '\n' ' ' <"$b/commit")"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
} | tee "$out/attention_env.log"
if [ "${SKIP_TEST:-0}" != 1 ]; then
  timeout 240 "$b/attention_cuda_test" 2>&1 | tee "$out/attention_test.log" | grep -E "vs|decode|OK|FAIL|PASSED|seed|Failure|error" | head -80
fi
timeout 120 "$b/attention_cuda_bench" --decode --reps 20 2>&1 | tee "$out/attention_decode_bench.log"
timeout 120 "$b/attention_cuda_bench" --reps 30 2>&1 | tee "$out/attention_bench.log"
if [ "${SKIP_LONG:-0}" != 1 ]; then
  for bt in "2 8192" "1 32768"; do
    set -- $bt
    timeout 120 "$b/attention_cuda_bench" --B "$1" --T "$2" --window 0 --window 1024 --reps 10
    timeout 60 "$b/deltanet_cuda_bench" --B "$1" --T "$2" --reps 10 | grep RESULT
    timeout 60 "$b/mesa_cuda_bench" --B "$1" --T "$2" --reps 10 | tail -3
  done 2>&1 | tee "$out/attention_long.log"
fi
if [ "${SKIP_TORCH:-0}" != 1 ]; then
  long=--long
  [ "${SKIP_LONG:-0}" = 1 ] && long=
  PYTHONUNBUFFERED=1 timeout 300 python3 "$here/attention_sdpa_bench.py" --reps 30 $long 2>&1 |
    grep -v Warning | tee "$out/attention_torch.log"
fi
