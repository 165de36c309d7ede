#!/usr/bin/env bash
# Here (no GPU): builds the CUDA backend's GPU test and benchmark and stages them, plus the Debian
# shared libraries the GPU machine (Ubuntu 24.04, CUDA 13) lacks, into .device_model/ (git-ignored).
# Then, on the GPU machine with carry [".device_model"]:  bash model/backend/cuda/run_device.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
targets=(//model/backend/cuda:cuda_backend_test //model/backend/cuda:cuda_backend_bench
         //model/backend/cuda:cuda_backend_factory_test)
bazel build -c opt "${targets[@]}"
rm -rf .device_model
mkdir -p .device_model/bin .device_model/lib
for t in "${targets[@]}"; do
  name=${t##*:}
  cp -f "bazel-bin/model/backend/cuda/${name}" .device_model/bin/
  chmod u+w ".device_model/bin/${name}"
done
cp model/backend/cuda/run_device.sh .device_model/
# Debian's Abseil, OpenBLAS (+ Fortran runtime), protobuf and GoogleTest sonames are not on Ubuntu 24.04;
# glibc, libstdc++ and the CUDA libraries come from the GPU machine.
for bin in .device_model/bin/*; do
  ldd "$bin" | awk '/=>/ {print $3}' |
    grep -E 'libabsl|openblas|libgfortran|libquadmath|libgtest|libgmock|libprotobuf' || true
done | sort -u | while read -r lib; do
  cp -fL "$lib" .device_model/lib/
done
du -sh .device_model
ls .device_model/bin .device_model/lib | head -50
