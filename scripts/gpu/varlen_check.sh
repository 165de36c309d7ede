#!/usr/bin/env bash
# Packed documents (data.reset_at_bos) on the GPU machine: the CUDA paths with document starts
# against the CPU (docs/trainer.md, "Document resets"), plus the existing cases of the kernels
# whose code changed. Run from the repository root with the staged binaries carried in
# .device/varlen/gpu.tgz; logs go to $OUT.
set -uo pipefail
mkdir -p /tmp/x && tar xzf .device/varlen/gpu.tgz -C /tmp/x
source scripts/gpu/gpu_jobs.sh && use_device_libs /tmp/x/bin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/device.txt"
date -u | tee -a "$OUT/device.txt"
rc=0
run() {
  local log=$1; shift
  echo "== $*" | tee -a "$OUT/summary.txt"
  "$@" >"$OUT/$log" 2>&1
  local r=$?
  [ $r -ne 0 ] && rc=$r
  grep -E '^\[  (PASSED|FAILED) |tests? ran' "$OUT/$log" | tee -a "$OUT/summary.txt"
}
run attention.log /tmp/x/bin/attention_cuda_test
run deltanet.log /tmp/x/bin/deltanet_cuda_test
run backend.log /tmp/x/bin/cuda_backend_test \
  --gtest_filter='*FillAtDocumentStarts*:*CausalConv*:CudaModel.DocumentResetsMatchCpu:CudaModel.AttentionHybridsMatchCpu:CudaModel.DeltaNetHybridMatchesCpu'
exit $rc
