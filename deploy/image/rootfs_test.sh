#!/usr/bin/env bash
# The image, proved without Docker: a Debian 12 root file system made by mmdebstrap with the
# image's runtime packages and user (deploy/image/rootfs.sh, running install.sh system as the
# Dockerfile does), the binaries installed by the same install.sh, then, as uid 10001 in a
# chroot (own mount and PID namespaces), a coordinator, a worker and a training job that must
# succeed and leave its store and checkpoints owned by that user. Needs root.
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin  # chroot, mmdebstrap helpers (Bazel passes /usr/bin:/bin)
if [ "$(id -u)" -ne 0 ]; then
  echo "rootfs_test: needs root (chroot, mounts); CI runs as root" >&2
  exit 1
fi
src=deploy/image
work=${TEST_TMPDIR:-$(mktemp -d)}
root=$work/root
log=$work/rootfs.log
mkdir -p "$work"
# About 330 MB. The mounts below live in a namespace of their own and are gone by then.
trap 'rm -rf --one-file-system "$root"' EXIT

# The Dockerfile installs through the same script at the same path as rootfs.sh does.
for line in 'COPY deploy/image/install.sh /usr/local/lib/mesa/install.sh' \
  'RUN sh /usr/local/lib/mesa/install.sh system' \
  'RUN sh /usr/local/lib/mesa/install.sh binaries /tmp/mesa-bin' 'USER 10001:10001'; do
  if ! grep -qxF "$line" deploy/Dockerfile && ! grep -qF "$line &&" deploy/Dockerfile; then
    echo "rootfs_test: deploy/Dockerfile lacks \"$line\": the test no longer mirrors it" >&2
    exit 1
  fi
done

start=$(date +%s)
if ! tarball=$(bash "$src/rootfs.sh" 2>"$log"); then
  tail -40 "$log" >&2
  echo "rootfs_test: building the root file system failed" >&2
  exit 1
fi
rm -rf "$root" && mkdir -p "$root"
tar -xf "$tarball" -C "$root"
echo "rootfs_test: root file system ready in $(($(date +%s) - start)) s ($tarball)"

# The Dockerfile's last RUN: the staged binaries, installed by the same script.
mkdir -p "$root/tmp/mesa-bin"
cp coordinator/mesa-coordinator worker/mesa-worker model/main/mesa-train model/main/mesa-data \
  serve/mesa-serve cli/mesactl "$root/tmp/mesa-bin/"
chroot "$root" sh /usr/local/lib/mesa/install.sh binaries /tmp/mesa-bin
rm -rf "$root/tmp/mesa-bin"

# What runs inside, as the image's user: the same checks as //deploy:image_build_test's.
cp deploy/image/smoke.sh "$root/tmp/run.sh"

# Own mount and PID namespaces: the mounts vanish and every process inside is killed when the
# namespace's first process exits. CUDA's libraries are where the Dockerfile copies them.
cuda=/usr/local/cuda/lib64
unshare --mount --pid --fork --propagation private bash -euo pipefail -c '
  root=$1 cuda=$2
  mount -t proc proc "$root/proc"
  mount --rbind /dev "$root/dev"
  mount --rbind -o ro /sys "$root/sys"
  if [ -d "$cuda" ]; then
    mkdir -p "$root$cuda"
    mount --bind -o ro "$(readlink -f "$cuda")" "$root$cuda"
  fi
  exec chroot --userspec=10001:10001 --groups=10001 "$root" env -i PATH=/usr/local/bin:/usr/bin:/bin \
    HOME=/var/lib/mesa bash /tmp/run.sh' _ "$root" "$cuda"
echo "rootfs_test: passed in $(($(date +%s) - start)) s"
