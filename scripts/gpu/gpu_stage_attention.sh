#!/usr/bin/env bash
# Here (no GPU): builds the attention CUDA test and benchmark, plus the Mesa and DeltaNet
# benchmarks for the long-context comparison, and packs them with scripts/gpu/gpu_stage.sh into
# DEST/gpu.tgz (default .device/attention). On the GPU machine (carry DEST):
#   bash scripts/gpu/gpu_check_attention.sh DEST/gpu.tgz
# Usage: bash scripts/gpu/gpu_stage_attention.sh [DEST]
set -euo pipefail
targets=(//kernels/attention/cuda:attention_cuda_test //bench:attention_cuda_bench
  //bench:deltanet_cuda_bench //bench:mesa_cuda_bench)
GPU_TARGETS="${targets[*]}" exec bash "$(dirname "$0")/gpu_stage.sh" "${1:-.device/attention}"
