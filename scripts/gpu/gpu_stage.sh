#!/usr/bin/env bash
# Here (no GPU): builds every GPU test and benchmark, and mesa-train, with Bazel, and packs them with
# the shared libraries the GPU machine (Ubuntu 24.04, CUDA 13, no Bazel, no gRPC) lacks into
# DEST/gpu.tgz (default .device, git-ignored; about 25 MB: the device tool carries at most 64 MiB),
# with bin/commit naming the commit built. Then, on the GPU machine with carry [".device"]:
#   bash scripts/gpu/gpu_check.sh
# Usage: [GPU_TARGETS="//a:b ..."] [GPU_STAGE_CPUS=2] bash scripts/gpu/gpu_stage.sh [DEST]
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=${1:-.device}
targets=(
  //kernels/mesa/cuda:mesa_cuda_test //kernels/tools:mesa_op //kernels/deltanet/cuda:deltanet_cuda_test
  //bench:deltanet_cuda_bench //kernels/tests:step_cuda_test //bench:decode_step_cuda_bench
  //bench:decode_bench //model/main:mesa-generate
  //tests/gpu:cuda_backend_test //model/backend/cuda:cuda_backend_factory_test
  //model/comm:comm_check_cuda //model/comm:nccl_communicator_gpu_test //model/main:mesa-train
  //bench:mesa_cuda_bench //bench:cuda_backend_bench //bench:nccl_allreduce_bench
  //kernels/attention/cuda:attention_cuda_test //bench:attention_cuda_bench //model/main:mesa-logits
  //kernels/rglru/cuda:rglru_cuda_test //kernels/mlstm/cuda:mlstm_cuda_test
  //kernels/ssd/cuda:ssd_cuda_test //bench:task_scoring_bench
)
# GPU_TARGETS="//a:b //c:d" stages only those (a quicker build for one topic's checks).
if [ -n "${GPU_TARGETS:-}" ]; then read -ra targets <<< "$GPU_TARGETS"; fi
bazel build -c opt --config=cuda --local_cpu_resources="${GPU_STAGE_CPUS:-1}" "${targets[@]}"
# Staged apart, so that other folders under DEST (other topics' stages) are left alone.
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$dest"
for t in "${targets[@]}"; do
  pkg=${t#//}; pkg=${pkg%%:*}; name=${t##*:}
  cp -fL "bazel-bin/${pkg}/${name}" "$stage/bin/"
  chmod u+w "$stage/bin/${name}"
done
# Debian's Abseil, OpenBLAS (+ Fortran runtime), protobuf, yaml-cpp, RE2, GoogleTest, gRPC (+ c-ares,
# upb), SQLite, prometheus-cpp (+ civetweb), curl and utf8proc sonames are not (or not surely) on Ubuntu 24.04; glibc, libstdc++, OpenSSL,
# OpenMPI and the CUDA libraries come from the GPU machine.
for bin in "$stage"/bin/*; do
  ldd "$bin" | awk '/=>/ {print $3}' |
    grep -E 'libabsl|openblas|libgfortran|libquadmath|libgtest|libgmock|libprotobuf|libyaml-cpp|libre2|libgrpc|libgpr|libupb|libaddress_sorting|libcares|libsqlite3|libpq|libprometheus-cpp|libcivetweb|libcurl|libcpp-httplib|libbrotli|libutf8proc' || true
done | sort -u | while read -r lib; do cp -fL "$lib" "$stage/lib/"; done
git rev-parse --short HEAD >"$stage/bin/commit"
git diff --quiet || echo "+dirty" >>"$stage/bin/commit"
tar czf "$dest/gpu.tgz" -C "$stage" bin lib
ls -la "$dest/gpu.tgz"
