#!/usr/bin/env bash
# evalplus: the CUDA Mesa op's per-token CG steps against the CPU chunked op (mesa_cuda_test).
set -uo pipefail
mkdir -p /tmp/x && tar xzf .device/evalplus/gpu.tgz -C /tmp/x
source scripts/gpu/gpu_jobs.sh && use_device_libs /tmp/x/bin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/device.txt"
date -u | tee -a "$OUT/device.txt"
timeout 240 /tmp/x/bin/mesa_cuda_test 2>&1 | tee "$OUT/mesa_cuda_test.log"
echo "rc ${PIPESTATUS[0]}" | tee -a "$OUT/mesa_cuda_test.log"
