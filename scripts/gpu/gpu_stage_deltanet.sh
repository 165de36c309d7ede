#!/usr/bin/env bash
# Here (no GPU): builds only the DeltaNet CUDA test and benchmark and stages them as variant NAME
# into DEST (default /work/main/.device/dn): DEST/NAME/bin + DEST/lib (the shared libraries the GPU
# machine lacks, as in gpu_stage.sh). Several variants (e.g. base, new) then travel in one call;
# on the GPU machine: bash scripts/gpu/gpu_check_deltanet_ab.sh (compares them in one run).
# MODEL=1 adds the CUDA backend's test and benchmark (the op inside the model).
# Usage: [MODEL=1] bash scripts/gpu/gpu_stage_deltanet.sh NAME [DEST]
set -euo pipefail
cd "$(dirname "$0")/../.."
name=${1:?variant name}
dest=${2:-/work/main/.device/dn}
targets=(//kernels/deltanet/cuda:deltanet_cuda_test //bench:deltanet_cuda_bench)
[ "${MODEL:-0}" = 1 ] && targets+=(//tests/gpu:cuda_backend_test //bench:cuda_backend_bench)
bazel build -c opt --config=cuda --local_cpu_resources=1 "${targets[@]}"
rm -rf "$dest/$name"
mkdir -p "$dest/$name/bin" "$dest/lib"
for t in "${targets[@]}"; do
  pkg=${t#//}; pkg=${pkg%%:*}; bin=${t##*:}
  cp -fL "bazel-bin/${pkg}/${bin}" "$dest/$name/bin/"
  chmod u+w "$dest/$name/bin/${bin}"
  ldd "bazel-bin/${pkg}/${bin}" | awk '/=>/ {print $3}' |
    grep -E 'libabsl|openblas|libgfortran|libquadmath|libgtest|libgmock|libprotobuf|libyaml-cpp' |
    while read -r lib; do cp -fL "$lib" "$dest/lib/"; done
done
git rev-parse --short HEAD >"$dest/$name/commit"
git diff --quiet || echo "+dirty" >>"$dest/$name/commit"
du -sh "$dest"
