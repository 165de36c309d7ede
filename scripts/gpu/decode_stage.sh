#!/usr/bin/env bash
# Here (no GPU): builds the fused decoding-step GPU test and benchmark (//kernels/tests:step_cuda_test,
# //bench:decode_step_cuda_bench) and packs them, the Debian shared libraries the GPU machine lacks
# (as scripts/gpu/gpu_stage.sh does) and the scripts that run them into DEST/decode.tgz (default
# .device/decode, git-ignored). On the GPU machine, with the folder carried:
#   mkdir -p /tmp/decode && tar xzf DEST/decode.tgz -C /tmp/decode && bash /tmp/decode/decode_check.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=$(realpath -m "${1:-.device/decode}")
targets=(//kernels/tests:step_cuda_test //bench:decode_step_cuda_bench)
bazel build -c opt --config=cuda --local_cpu_resources=1 "${targets[@]}"
stage=$(mktemp -d)
mkdir -p "$stage/bin" "$stage/lib" "$dest"
for t in "${targets[@]}"; do
  pkg=${t#//}; pkg=${pkg%%:*}; name=${t##*:}
  cp -fL "bazel-bin/${pkg}/${name}" "$stage/bin/"
  chmod u+w "$stage/bin/${name}"
done
for bin in "$stage"/bin/*; do
  ldd "$bin" | awk '/=>/ {print $3}' |
    grep -E 'libabsl|openblas|libgfortran|libquadmath|libgtest|libgmock' || true
done | sort -u | while read -r lib; do cp -fL "$lib" "$stage/lib/"; done
cp scripts/gpu/decode_check.sh scripts/gpu/gpu_jobs.sh "$stage/"
tar czf "$dest/decode.tgz" -C "$stage" .
rm -rf "$stage"
ls -la "$dest/decode.tgz"
