#!/usr/bin/env bash
# Builds deploy/Dockerfile, unchanged, into an OCI image with buildah: no Docker daemon, no
# registry, nothing fetched but Debian packages. Needs root (buildah --isolation chroot).
#   bash deploy/image/stage.sh                                  # the binaries into .image/bin
#   bash deploy/image/build_offline.sh build TAG [CONTEXT]      # prints TAG (CONTEXT: the repository)
#   bash deploy/image/build_offline.sh save TAG FILE            # a docker-archive tar (docker load)
#   bash deploy/image/build_offline.sh buildah ARGS...          # buildah on the same store
# The Dockerfile's FROM debian:bookworm-slim is a Debian 12 minbase root file system made by
# mmdebstrap (deploy/image/rootfs.sh base) and given that name in a store of our own
# ($MESA_IMAGE_STORE, default ~/.cache/mesanet-image). NVIDIA's CUDA image cannot be pulled, so the
# CUDA stage runs on a stand-in (the Dockerfile's CUDA_IMAGE argument) holding this machine's CUDA
# 13 libraries where NVIDIA's image has them; $MESA_CUDA_IMAGE names another image in the store
# (e.g. the real one, loaded with `build_offline.sh buildah pull docker-archive:FILE`).
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin  # ldconfig, mmdebstrap's helpers (Bazel passes /usr/bin:/bin)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
store=${MESA_IMAGE_STORE:-${HOME:-/root}/.cache/mesanet-image}
# The only base this script can make: the Dockerfile must still start its image from it.
base=docker.io/library/debian:bookworm-slim
cuda_standin=localhost/mesanet-cuda-standin:13
# What the CUDA stage copies (deploy/Dockerfile); NCCL is found through ldconfig, as there.
cuda_lib=${MESA_CUDA_LIB:-/usr/local/cuda/lib64}
cuda_libs="libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnvrtc.so.13 libnvrtc-builtins.so.13.0"
# cuDNN 9's graph API (deploy/Dockerfile copies these; NVIDIA's cudnn image has them in
# /usr/lib/x86_64-linux-gnu). This machine's CUDA directory holds them ($MESA_CUDNN_LIB).
cudnn_lib=${MESA_CUDNN_LIB:-$cuda_lib}
cudnn_libs="libcudnn.so.9 libcudnn_graph.so.9 libcudnn_engines_precompiled.so.9
  libcudnn_engines_runtime_compiled.so.9 libcudnn_heuristic.so.9"
# Where the key of what a base or stand-in image was made from is kept.
key_label=org.mesanet.source-key

fail() {
  echo "build_offline.sh: $*" >&2
  exit 1
}
usage() {
  echo "usage: build_offline.sh build TAG [CONTEXT] | save TAG FILE | buildah ARGS..." >&2
  exit 2
}
[ "$(id -u)" -eq 0 ] || fail "needs root (buildah --isolation chroot, mounts)"
command -v buildah >/dev/null 2>&1 || fail "buildah not found; run scripts/setup.sh (Debian package buildah)"

# overlay where the kernel lets us mount it (a layer costs its own files), else vfs (every layer a
# full copy: slower, several GB). A store keeps the driver it was made with, hence one per driver.
storage_driver() {
  if [ -n "${MESA_IMAGE_STORAGE_DRIVER:-}" ]; then
    echo "$MESA_IMAGE_STORAGE_DRIVER"
    return
  fi
  mkdir -p "$store"
  local probe
  probe=$(mktemp -d "$store/.probe.XXXXXX")
  mkdir "$probe/lower" "$probe/upper" "$probe/work" "$probe/merged"
  # shellcheck disable=SC2016  # $1 is the inner shell's
  if unshare --mount sh -c 'mount -t overlay overlay \
      -o "lowerdir=$1/lower,upperdir=$1/upper,workdir=$1/work" "$1/merged"' _ "$probe" 2>/dev/null; then
    echo overlay
  else
    echo vfs
  fi
  rm -rf "$probe"
}
driver=$(storage_driver)
bh() {
  buildah --root "$store/$driver/root" --runroot "$store/$driver/run" --storage-driver "$driver" "$@"
}

# IMAGE KEY: whether the store holds IMAGE made from KEY.
made_from() {
  [ "$(bh inspect --type image --format "{{index .OCIv1.Config.Labels \"$key_label\"}}" "$1" \
    2>/dev/null)" = "$2" ]
}

make_base() {
  local tarball key ctr
  tarball=$(bash "$here/rootfs.sh" base)
  key=$(basename "$tarball" .tar)
  made_from "$base" "$key" && return 0
  ctr=$(bh from scratch)
  bh add "$ctr" "$tarball" / >/dev/null
  # The configuration of Docker Hub's debian:bookworm-slim.
  bh config --label "$key_label=$key" --cmd bash \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr"
  bh commit --quiet --rm "$ctr" "$base" >/dev/null
  echo "build_offline.sh: $base made from $tarball" >&2
}

make_cuda_standin() {
  local libs=() cudnn=() f nccl key ctr staged
  for f in $cuda_libs; do libs+=("$cuda_lib/$f"); done
  for f in $cudnn_libs; do cudnn+=("$cudnn_lib/$f"); done
  nccl=$(ldconfig -p | sed -n 's/.*libnccl.so.2 .*=> //p' | head -1)
  [ -n "$nccl" ] || fail "libnccl.so.2 is not in ldconfig's cache; the CUDA stand-in needs NCCL"
  for f in "${libs[@]}" "${cudnn[@]}" "$nccl"; do
    [ -f "$f" ] || fail "$f not found; the CUDA stand-in takes this machine's CUDA 13 and cuDNN 9 \
(MESA_CUDA_LIB, MESA_CUDNN_LIB, docs/build.md) or set MESA_CUDA_IMAGE"
  done
  key=$(stat -L -c '%n %s %Y' "${libs[@]}" "${cudnn[@]}" "$nccl" | sha256sum | cut -c1-16)
  made_from "$cuda_standin" "$key" && return 0
  # The files, not the links to them, under the names the Dockerfile copies.
  staged=$(mktemp -d "$store/.cuda.XXXXXX")
  trap 'rm -rf "$staged"' EXIT
  mkdir "$staged/lib64" "$staged/lib"
  cp -L "${libs[@]}" "$staged/lib64/"
  cp -L "$nccl" "$staged/lib/libnccl.so.2"
  cp -L "${cudnn[@]}" "$staged/lib/"
  ctr=$(bh from --pull-never "$base")
  # Where nvidia/cuda:13.0.0-cudnn-runtime-ubuntu24.04 has them.
  bh copy "$ctr" "$staged/lib64/" /usr/local/cuda/lib64/ >/dev/null
  bh copy "$ctr" "$staged/lib/" /usr/lib/x86_64-linux-gnu/ >/dev/null
  bh run --isolation chroot "$ctr" -- ldconfig
  bh config --label "$key_label=$key" "$ctr"
  bh commit --quiet --rm "$ctr" "$cuda_standin" >/dev/null
  rm -rf "$staged"
  trap - EXIT
  echo "build_offline.sh: $cuda_standin made from ${libs[*]} ${cudnn[*]} $nccl" >&2
}

build() {
  local tag=$1 context=$2 start cuda_image
  start=$(date +%s)
  [ -f "$context/deploy/Dockerfile" ] || fail "$context/deploy/Dockerfile not found"
  [ -d "$context/.image/bin" ] || fail "$context/.image/bin missing: run deploy/image/stage.sh"
  grep -qx "FROM ${base#docker.io/library/}" "$context/deploy/Dockerfile" ||
    fail "deploy/Dockerfile no longer starts from ${base#docker.io/library/}, the base made here"
  make_base
  cuda_image=${MESA_CUDA_IMAGE:-}
  if [ -z "$cuda_image" ]; then
    make_cuda_standin
    cuda_image=$cuda_standin
  fi
  # --layers: unchanged steps (the Debian packages, CUDA) come from the store's cache.
  bh bud --isolation chroot --pull-never --layers --build-arg "CUDA_IMAGE=$cuda_image" \
    -f "$context/deploy/Dockerfile" -t "$tag" "$context" >&2
  # Images no name points at any more (earlier builds of TAG).
  bh rmi --prune >/dev/null
  echo "build_offline.sh: built $tag ($driver store $store) in $(($(date +%s) - start)) s" >&2
  echo "$tag"
}

case "${1:-}" in
  build)
    [ $# -eq 2 ] || [ $# -eq 3 ] || usage
    build "$2" "${3:-$(cd "$here/../.." && pwd)}"
    ;;
  save)
    [ $# -eq 3 ] || usage
    tmp="$3.tmp.$$"
    trap 'rm -f "$tmp"' EXIT
    bh push --quiet "$2" "docker-archive:$tmp:$2"
    mv -f "$tmp" "$3"  # atomic: no half-written archive under FILE
    ;;
  buildah)
    shift
    bh "$@"
    ;;
  *) usage ;;
esac
