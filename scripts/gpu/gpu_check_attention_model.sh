#!/usr/bin/env bash
# On the GPU machine (staged by scripts/gpu/gpu_stage.sh, carried as .device/<name>/gpu.tgz): the
# attention mixer's CUDA checks (attention hybrids vs the CPU model, CUDA decoding vs the full
# forward and the CPU), then time per decoded token of a KV-cache Transformer of MesaNet-small's
# size (--mixer attention: 14 global attention layers) against MesaNet-small (docs/inference.md).
#   bash gpu_check_attention_model.sh DIR_WITH_GPU_TGZ
set -uo pipefail
src=${1:?directory holding gpu.tgz}
out=${OUT:-/tmp/out}
mkdir -p /tmp/x "$out"
tar xzf "$src/gpu.tgz" -C /tmp/x
source scripts/gpu/gpu_jobs.sh
use_device_libs /tmp/x/bin
nvidia-smi --query-gpu=name,memory.total --format=csv | tee "$out/device.txt"
/tmp/x/bin/cuda_backend_test \
  --gtest_filter='CudaModel.AttentionHybridsMatchCpu:CudaModel.DeltaNetHybridMatchesCpu:CudaDecode.*' \
  2>&1 | tee "$out/cuda_backend_test.log" | grep -E '^\[|seed|Model/|worst|rel' | tail -40
# Batch 1: each context prefilled in one piece (the attention layers' fused operator); batch 64:
# pieces of 1024 (64 x 1024 tokens of activations), so the KV-cache model only at 1k there.
for mixer in mesa attention; do
  timeout 70 /tmp/x/bin/decode_bench --mixer "$mixer" --batches 1 --contexts 1024,8192,32768 \
    --chunk 32768 --steps 16 2>&1 | tee -a "$out/decode_bench.log"
done
timeout 45 /tmp/x/bin/decode_bench --mixer mesa --batches 64 --contexts 1024,8192,32768 \
  --steps 16 2>&1 | tee -a "$out/decode_bench.log"
timeout 45 /tmp/x/bin/decode_bench --mixer attention --batches 64 --contexts 1024 \
  --steps 16 2>&1 | tee -a "$out/decode_bench.log"
