#!/usr/bin/env bash
# Prints the path of a Debian 12 (bookworm) root file system tarball, variant minbase (what
# debian:bookworm-slim is made of):
#   rootfs.sh         what deploy/Dockerfile's first stages hold: minbase plus `install.sh system`,
#                     run by the same script at the same path (//deploy:rootfs_test)
#   rootfs.sh base    minbase alone, the FROM of deploy/image/build_offline.sh's image build
# Built with mmdebstrap from the Debian archive on first use (15-110 s here, the archive's speed
# varies) and cached under $MESA_ROOTFS_CACHE (default ~/.cache/mesanet-rootfs), keyed by the hash
# of the recipe (install.sh included); older tarballs of the same kind are removed. Needs root
# (mmdebstrap --mode=root) for a cache miss.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The file itself, not a link to it (Bazel runfiles): copy-in copies links as links.
install_sh=$(readlink -f "$here/install.sh")
mirror=${MESA_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=${MESA_ROOTFS_CACHE:-${HOME:-/root}/.cache/mesanet-rootfs}

if ! command -v mmdebstrap >/dev/null 2>&1; then
  echo "rootfs.sh: mmdebstrap not found; run scripts/setup.sh (Debian package mmdebstrap)" >&2
  exit 1
fi
case "${1:-}" in
  "")
    kind=mesa
    hooks=(--customize-hook='mkdir -p "$1/usr/local/lib/mesa"'
      --customize-hook="copy-in $install_sh /usr/local/lib/mesa"
      --customize-hook='chroot "$1" sh /usr/local/lib/mesa/install.sh system')
    ;;
  base)
    kind=base
    hooks=()
    ;;
  *)
    echo "usage: rootfs.sh [base]" >&2
    exit 2
    ;;
esac
# The recipe: change any of it and the key changes.
recipe=(--variant=minbase --mode=root --format=tar "${hooks[@]}" bookworm)
# install.sh counts by content, not by path: checkouts in other directories share the cache.
key=$( (if [ "$kind" = mesa ]; then cat "$install_sh"; fi
  printf '%s\n' "${recipe[@]/$install_sh/install.sh}" "$mirror") | sha256sum | cut -c1-16)
tarball=$cache/bookworm-$kind-$key.tar
if [ ! -f "$tarball" ]; then
  mkdir -p "$cache"
  tmp=$(mktemp "$cache/.building.XXXXXX")
  trap 'rm -f "$tmp"' EXIT
  start=$(date +%s)
  mmdebstrap --quiet "${recipe[@]}" "$tmp" "$mirror" >&2
  mv -f "$tmp" "$tarball"  # atomic: a reader never sees a half-written tarball
  trap - EXIT
  find "$cache" -maxdepth 1 -name "bookworm-$kind-*.tar" ! -path "$tarball" -delete
  echo "rootfs.sh: built $tarball in $(($(date +%s) - start)) s" >&2
fi
echo "$tarball"
