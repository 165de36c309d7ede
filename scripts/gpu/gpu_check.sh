#!/usr/bin/env bash
# On the GPU machine (CUDA 13, no Bazel): every GPU check, from binaries staged here by
# scripts/gpu/gpu_stage.sh and carried in .device/. In order: the Mesa kernels (CUDA vs float64
# reference, forward and every gradient, bf16 and fp32; then timings), the op-check tool
# (`mesa_op --device cuda` and the CPU implementations against its float64 reference), the CUDA
# model backend (every layer and the whole model vs the CPU backend; then a MesaNet-small training
# step), and, on 2+ GPUs, the NCCL data-parallel checks (collectives, bus bandwidth, 1 vs 2 GPUs). Full logs go to
# $OUT/{kernels,opcheck,model,comm}.log; a summary of each part is printed last.
# Env: BENCH_REPS (kernel timing repetitions, default 10), GPU_CHECK_PARTS (default
# "kernels opcheck model comm").
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/gpu_check}
mkdir -p "$out"
if [ -f .device/gpu.tgz ] && [ ! -d .device/bin ]; then tar xzf .device/gpu.tgz -C .device; fi
[ -d .device/bin ] || { echo "no staged binaries: run scripts/gpu/gpu_stage.sh first and carry .device" >&2; exit 2; }
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
gpus=$(nvidia-smi --list-gpus 2>/dev/null | wc -l)
parts=${GPU_CHECK_PARTS:-kernels opcheck model comm}
status=0
declare -A rc
for part in $parts; do
  case $part in
    kernels) OUT=/tmp/gpu_check/kernels BENCH_REPS=${BENCH_REPS:-10} \
               bash scripts/gpu/gpu_check_kernels.sh .device/bin > "$out/kernels.log" 2>&1 ;;
    opcheck) OUT=/tmp/gpu_check/opcheck bash scripts/gpu/gpu_check_opcheck.sh .device \
               > "$out/opcheck.log" 2>&1 ;;
    model)   OUT=/tmp/gpu_check/model bash scripts/gpu/run_device.sh .device \
               > "$out/model.log" 2>&1 ;;
    comm)    if [ "$gpus" -lt 2 ]; then echo "skipped: $gpus GPU(s)" > "$out/comm.log"; rc[$part]=skipped; continue; fi
             OUT=/tmp/gpu_check/comm bash scripts/gpu/gpu_comm_check.sh run .device > "$out/comm.log" 2>&1 ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
  rc[$part]=$?
  [ "${rc[$part]}" -ne 0 ] && status=1
done
for part in $parts; do
  echo
  echo "################ $part (rc=${rc[$part]})"
  sed -n '/================ .*summary/,$p' "$out/$part.log" | tail -n 40
  [ "$part" = opcheck ] && grep -E "FAIL|^seed" "$out/$part.log" | head -20
done
exit $status
