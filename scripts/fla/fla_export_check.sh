#!/usr/bin/env bash
# On the GPU machine: loads the export made by scripts/fla/make_export_check.sh with FLA's
# MesaNetForCausalLM and compares its logits with ours (mesa-logits on the CPU and on CUDA) on the
# same tokens (scripts/fla/compare_logits.py). Carried as DIR (default .device/export: gpu.tgz,
# these two scripts, check/) together with FLA's source (FLA_DIR, default .fla: the directory
# holding its fla/ package); logs to $OUT.
#   [FLA_DIR=.fla] bash DIR/fla_export_check.sh [DIR]
set -uo pipefail
here=${1:-.device/export}
fla_dir=${FLA_DIR:-.fla}
out=${OUT:-/tmp}
mkdir -p /tmp/x "$out"
tar xzf "$here/gpu.tgz" -C /tmp/x
# shellcheck disable=SC1091
source scripts/gpu/gpu_jobs.sh && use_device_libs /tmp/x/bin
export PYTHONPATH="$PWD/$fla_dir${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
c=$here/check
for mode in cpu:fp32 cuda:fp32 cuda:bf16; do
  /tmp/x/bin/mesa-logits --checkpoint="$c/checkpoints" --tokens="$c/tokens.txt" \
    --device="${mode%%:*}" --precision="${mode##*:}" \
    --out="$out/logits_${mode/:/_}.safetensors" || echo "mesa-logits $mode failed"
done
timeout 150 python3 "$here/compare_logits.py" --hf "$c/hf" --tokens "$c/tokens.txt" \
  --ours "cpu_fp32=$out/logits_cpu_fp32.safetensors" \
  --ours "cuda_fp32=$out/logits_cuda_fp32.safetensors" \
  --ours "cuda_bf16=$out/logits_cuda_bf16.safetensors" 2>&1 | grep -v "^\s*$" | tail -40
