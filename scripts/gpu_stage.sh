#!/usr/bin/env bash
# Here (no GPU): builds the CUDA GPU test and benchmark with Bazel and stages them, plus the
# shared libraries the GPU machine (Ubuntu 24.04, CUDA 13, no Bazel) lacks, into .device/
# (git-ignored). Then run on the GPU machine, with .device carried:
#   bash scripts/gpu_check.sh            (reads .device/bin and .device/lib)
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(//kernels/cuda:mesa_cuda_test //kernels/cuda:mesa_cuda_bench)
bazel build -c opt "${targets[@]}"
rm -rf .device/bin .device/lib
mkdir -p .device/bin .device/lib
for t in "${targets[@]}"; do
  name=${t##*:}
  cp -f "bazel-bin/kernels/cuda/${name}" .device/bin/
  chmod u+w ".device/bin/${name}"
done
# Libraries from Debian that Ubuntu 24.04 does not ship in these versions (Abseil, OpenBLAS and
# its Fortran runtime). glibc, libstdc++ and the CUDA libraries come from the GPU machine.
for bin in .device/bin/*; do
  ldd "$bin" | awk '/=>/ {print $3}' | grep -E 'libabsl|openblas|libgfortran|libquadmath|libgtest|libgmock' || true
done | sort -u | while read -r lib; do
  cp -fL "$lib" .device/lib/
done
du -sh .device
ls .device/bin
