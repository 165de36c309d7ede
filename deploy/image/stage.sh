#!/usr/bin/env bash
# Builds the image's binaries and copies them (not Bazel's links) into .image/bin, the directory
# deploy/Dockerfile copies from; then `docker build -f deploy/Dockerfile .` from the repository.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
targets=(//coordinator:mesa-coordinator //worker:mesa-worker //model/main:mesa-train
  //model/main:mesa-data //serve:mesa-serve //cli:mesactl)
# -c opt: release binaries (-DNDEBUG: no debug assertions, and `--version` stops saying "Debug
# build"), as scripts/gpu/gpu_stage.sh builds them; extra arguments go to bazel after it.
bazel build -c opt --config=cuda "$@" "${targets[@]}"
bin=$(bazel info -c opt "$@" bazel-bin)
rm -rf .image/bin && mkdir -p .image/bin
for t in "${targets[@]}"; do
  path=${t#//}
  cp -L "$bin/${path%%:*}/${path##*:}" .image/bin/
done
ls -l .image/bin
