#!/usr/bin/env bash
# Here (no GPU): builds the attention CUDA test and benchmark, plus the Mesa and DeltaNet
# benchmarks for the long-context comparison, and packs them with the shared libraries the GPU
# machine lacks (as gpu_stage.sh does) into DEST/gpu.tgz (default .device/attention). On the GPU
# machine (carry DEST): bash scripts/gpu/gpu_check_attention.sh DEST/gpu.tgz
# Usage: bash scripts/gpu/gpu_stage_attention.sh [DEST]
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=${1:-.device/attention}
targets=(//kernels/attention/cuda:attention_cuda_test //bench:attention_cuda_bench
  //bench:deltanet_cuda_bench //bench:mesa_cuda_bench)
bazel build -c opt --local_cpu_resources=1 "${targets[@]}"
stage=$(mktemp -d)
mkdir -p "$stage/bin" "$stage/lib" "$dest"
for t in "${targets[@]}"; do
  pkg=${t#//}; pkg=${pkg%%:*}; bin=${t##*:}
  cp -fL "bazel-bin/${pkg}/${bin}" "$stage/bin/"
  chmod u+w "$stage/bin/${bin}"
  ldd "bazel-bin/${pkg}/${bin}" | awk '/=>/ {print $3}' |
    grep -E 'libabsl|openblas|libgfortran|libquadmath|libgtest|libgmock|libprotobuf|libyaml-cpp|libre2' |
    while read -r lib; do cp -fL "$lib" "$stage/lib/"; done
done
git rev-parse --short HEAD >"$stage/bin/commit"
git diff --quiet || echo "+dirty" >>"$stage/bin/commit"
tar czf "$dest/gpu.tgz" -C "$stage" bin lib
rm -rf "$stage"
ls -la "$dest/gpu.tgz"
