#!/usr/bin/env bash
# On the GPU machine: the attention GPU test and the benchmark's decode rows (B 1 and 64 at 1k, 8k
# and 32k cached tokens, MesaNet-small's 6 heads of 128) plus its default fwd/bwd shapes. Logs under
# OUT (default /tmp). Usage, from the repository root: bash PATH/gpu_check_attention_decode.sh TGZ
# (TGZ from scripts/gpu/gpu_stage_attention.sh).
set -uo pipefail
out=${OUT:-/tmp}
x=$(mktemp -d)
tar xzf "${1:?gpu.tgz}" -C "$x" || exit 1
b=$x/bin
source scripts/gpu/gpu_jobs.sh
use_device_libs "$b"
{
  date -u
  [ -f "$b/commit" ] && echo "commit $(tr '\n' ' ' <"$b/commit")"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
} | tee "$out/attention_env.log"
timeout 120 "$b/attention_cuda_test" 2>&1 | tee "$out/attention_test.log" |
  grep -E "vs|decode|OK|FAIL|PASSED|seed|Failure|error" | head -80
timeout 120 "$b/attention_cuda_bench" --decode --reps 20 2>&1 | tee "$out/attention_decode_bench.log"
timeout 120 "$b/attention_cuda_bench" --reps 30 2>&1 | tee "$out/attention_bench.log"
