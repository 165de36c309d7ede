#!/bin/sh
# Installs the MesaNet runtime into a Debian 12 (bookworm) root file system. The one script used
# both by deploy/Dockerfile (inside debian:bookworm-slim) and by //deploy:rootfs_test (inside a
# bookworm tree made by mmdebstrap), so what the test runs is what the image holds.
#   install.sh system         runtime packages, the mesa user (uid/gid 10001) and its directories
#   install.sh binaries DIR   the service binaries from DIR into /usr/local/bin
set -eu

# Debian 12 packages of the shared libraries the Bazel build links (ldd of each binary; the
# rootfs test fails on any "not found"). CUDA, cuBLAS and NCCL are not Debian packages: the
# Dockerfile copies them from NVIDIA's runtime image into /usr/local/cuda/lib64 (the binaries'
# RUNPATH), and the NVIDIA container runtime mounts the driver.
PACKAGES="ca-certificates libabsl20220623 libc-ares2 libcivetweb1 libcpp-httplib0.11 libcurl4 libgrpc++1.51 libgrpc29
  libopenblas0-pthread libopenmpi3 openmpi-bin libprometheus-cpp-core1.0
  libprometheus-cpp-pull1.0 libprotobuf32 libre2-9 libsentencepiece0 libsqlite3-0 sqlite3 libpq5 libssl3
  libutf8proc2 libyaml-cpp0.7 libzstd1 zlib1g"
BINARIES="mesa-coordinator mesa-worker mesa-train mesa-data mesa-serve mesactl"
# The image's user; the Kubernetes manifests run as it (runAsUser/fsGroup 10001).
MESA_UID=10001
# Directories the services write: the coordinator's store, the worker's workdir, checkpoints.
STATE_DIRS="/var/lib/mesa /var/lib/mesa/work /checkpoints"

usage() {
  echo "usage: install.sh system | binaries DIR" >&2
  exit 2
}

case "${1:-}" in
  system)
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086  # the list is word-split on purpose
    apt-get install -y -qq --no-install-recommends $PACKAGES
    rm -rf /var/lib/apt/lists/*
    groupadd --gid "$MESA_UID" mesa
    useradd --uid "$MESA_UID" --gid "$MESA_UID" --home-dir /var/lib/mesa --no-create-home \
      --shell /usr/sbin/nologin mesa
    # Group-writable and setgid: a volume mounted here with fsGroup 10001 behaves the same.
    for d in $STATE_DIRS; do
      install -d -o "$MESA_UID" -g "$MESA_UID" -m 2775 "$d"
    done
    ;;
  binaries)
    [ $# -eq 2 ] || usage
    for b in $BINARIES; do
      if [ ! -f "$2/$b" ]; then
        echo "install.sh: $2/$b missing (stage the binaries with deploy/image/stage.sh)" >&2
        exit 1
      fi
      install -m 0755 "$2/$b" "/usr/local/bin/$b"
    done
    ;;
  *) usage ;;
esac
