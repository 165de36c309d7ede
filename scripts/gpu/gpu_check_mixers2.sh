#!/usr/bin/env bash
# On the GPU machine: the mLSTM and Mamba-2 (SSD) checks in one call. (1) the ops' GPU tests
# (kernels/mlstm/cuda:mlstm_cuda_test, kernels/ssd/cuda:ssd_cuda_test: fp32 and bf16 against the
# float64 oracle, carried states, resets, determinism) with their timing tables; (2) our GLA op
# (the Mesa op at 0 CG steps) at the mLSTM's shapes, for scale; (3) the cross-layer GPU test's
# mLSTM and Mamba-2 cases (the whole model vs the CPU model, decoding); (4) mesa-train tokens/s
# at the MesaNet-small shape for every mixer.
# Staged by: bash scripts/gpu/gpu_stage.sh   (carry [".device"])
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/gpu_check}/mixers2
mkdir -p "$out"
if [ -f .device/gpu.tgz ] && [ ! -d .device/bin ]; then tar xzf .device/gpu.tgz -C .device; fi
source scripts/gpu/gpu_jobs.sh
use_device_libs .device/bin
echo "commit $(cat .device/bin/commit | tr '\n' ' ')"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
status=0
for t in mlstm_cuda_test ssd_cuda_test; do
  echo "== $t"
  timeout 240 .device/bin/$t > "$out/$t.log" 2>&1 || status=1
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|_BENCH|Failure|Expected|Which is|actual" \
    "$out/$t.log" | head -40
done
echo "== GLA op (mesa_cuda_bench --steps 0), H6 D128 bf16"
for shape in "8 2048" "1 32768"; do
  set -- $shape
  timeout 60 .device/bin/mesa_cuda_bench --B "$1" --T "$2" --H 6 --steps 0 2>&1 | grep RESULT
done
echo "== cuda_backend_test (mLSTM and Mamba-2 cases)"
timeout 300 .device/bin/cuda_backend_test \
  --gtest_filter='CudaModel.MlstmMatchesCpu:CudaModel.Mamba2MatchesCpu:CudaDecode.*' \
  > "$out/cuda_backend_test.log" 2>&1 || status=1
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|Expected|Which is" "$out/cuda_backend_test.log" |
  head -20
grep -E "OPCHECK Model/.*(mlstm|mamba2/).*(loss |logits|all_grads)" "$out/cuda_backend_test.log" | head -20
echo "== mesa-train tokens/s (MesaNet-small shape, B8 x T2048, bf16)"
work=/tmp/gpu_check_mixers2  # the runs' files stay on the machine; their summary lines are printed
mkdir -p "$work"
data=$work/data
python3 scripts/synthetic_shards.py "$data" 1500000 100000 > /dev/null
for model in mlstm mamba2 mamba2_mesa hawk attention mesa deltanet gated_deltanet; do
  case $model in
    mlstm) src=examples/train_mlstm_gpu.yaml ;;
    mamba2) src=examples/train_mamba2_gpu.yaml ;;
    mamba2_mesa) src=examples/train_mamba2_mesa_gpu.yaml ;;
    hawk) src=examples/train_hawk_gpu.yaml ;;
    attention) src=examples/train_hybrid_attention_gpu.yaml ;;
    mesa) src=examples/train_small_gpu.yaml ;;
    deltanet | gated_deltanet)  # MesaNet-small with every layer of this mixer
      src="$work/src_$model.yaml"
      sed -e "s|mixer: mesa|mixer: $model|" -e '/cg_steps:/d' -e '/gamma_cap:/d' \
        examples/train_small_gpu.yaml > "$src" ;;
  esac
  mixer_tokens_per_second $model $src "$work" "$data" || status=1
done
exit $status
