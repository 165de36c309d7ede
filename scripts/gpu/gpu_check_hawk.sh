#!/usr/bin/env bash
# On the GPU machine: the Hawk checks in one call. (1) kernels/rglru/cuda:rglru_cuda_test (fp32
# and bf16 against the float64 reference, resets, determinism) with its timing table; (2) the
# cross-layer GPU test's Hawk cases (GeLU gate and block-diagonal GEMMs CUDA vs CPU, the whole
# Hawk and Hawk-MesaNet model vs the CPU model, decoding); (3) mesa-train tokens/s at the MesaNet-small shape for hawk, [hawk, mesa], attention
# and mesa, 30 steps each on synthetic GPT-2 tokens, mean after step 10. FLA last (its first
# Triton compile is slow).
# Staged by: GPU_TARGETS="//kernels/rglru/cuda:rglru_cuda_test //tests/gpu:cuda_backend_test
#   //model/main:mesa-train" bash scripts/gpu/gpu_stage.sh   (carry [".device", ".fla"])
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/gpu_check}/hawk
mkdir -p "$out"
if [ -f .device/gpu.tgz ] && [ ! -d .device/bin ]; then tar xzf .device/gpu.tgz -C .device; fi
export LD_LIBRARY_PATH="$(realpath .device/lib):/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
echo "commit $(cat .device/bin/commit | tr '\n' ' ')"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
status=0
echo "== rglru_cuda_test"
timeout 240 .device/bin/rglru_cuda_test > "$out/rglru_cuda_test.log" 2>&1 || status=1
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|RGLRU_BENCH|Failure|Expected" "$out/rglru_cuda_test.log" | head -30
echo "== cuda_backend_test (Hawk cases)"
timeout 300 .device/bin/cuda_backend_test \
  --gtest_filter='*HawkGeluGateAndBlockDiagonalLinear*:*GatesLambdaSwiGlu*:*GateProjections*:CudaModel.HawkMatchesCpu:CudaModel.Mamba2MesaMatchesCpu:CudaDecode.*' \
  > "$out/cuda_backend_test.log" 2>&1 || status=1
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure" "$out/cuda_backend_test.log" | head -20
grep -E "Model/.*(hawk|mamba2)" "$out/cuda_backend_test.log" | head -16
echo "== mesa-train tokens/s (MesaNet-small shape, B8 x T2048, bf16)"
data=$(realpath "$out")/data
python3 scripts/synthetic_shards.py "$data" 1500000 100000 > /dev/null
source scripts/gpu/gpu_jobs.sh
for model in hawk hawk_mesa attention mesa mamba2_mesa; do
  case $model in
    mamba2_mesa) src=examples/train_mamba2_mesa_gpu.yaml ;;
    hawk) src=examples/train_hawk_gpu.yaml ;;
    hawk_mesa) src=examples/train_hawk_mesa_gpu.yaml ;;
    attention) src=examples/train_hybrid_attention_gpu.yaml ;;
    mesa) src=examples/train_small_gpu.yaml ;;
  esac
  mixer_tokens_per_second $model $src "$out" "$data" || status=1
done
echo "== FLA HGRN (scale)"
if [ -f .fla/fla/ops/hgrn/chunk.py ]; then
  PYTHONPATH="$PWD/.fla" timeout 280 python3 bench/fla_hgrn_bench.py > "$out/fla_hgrn.log" 2>&1
  grep FLA_HGRN "$out/fla_hgrn.log" || tail -5 "$out/fla_hgrn.log"
else
  echo "no .fla carried"
fi
exit $status
