#!/usr/bin/env bash
# deploy/Dockerfile built for real and run, without Docker: deploy/image/build_offline.sh builds it
# with buildah from a context of this build's binaries (what .dockerignore lets through), then
# the image's configuration is checked (user 10001, workdir) and, in a container of the image as
# its own user, deploy/image/smoke.sh starts every binary, a coordinator, a worker and a training
# job. Needs root and buildah (scripts/setup.sh); the store is cached (~/.cache/mesanet-image).
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin  # unshare, ldconfig (Bazel passes /usr/bin:/bin)
fail() {
  echo "image_build_test: $*" >&2
  exit 1
}
[ "$(id -u)" -eq 0 ] || fail "needs root (buildah --isolation chroot); CI runs as root"
build=deploy/image/build_offline.sh
work=${TEST_TMPDIR:-$(mktemp -d)}
context=$work/context
log=$work/build.log
tag=localhost/mesanet:image-build-test
start=$(date +%s)

# The build context: the Dockerfile, its script, .dockerignore and the staged binaries, the
# layout deploy/image/stage.sh leaves in a checkout.
rm -rf "$context"
mkdir -p "$context/deploy/image" "$context/.image/bin"
cp deploy/Dockerfile "$context/deploy/"
cp deploy/image/install.sh "$context/deploy/image/"
cp .dockerignore "$context/"
cp coordinator/mesa-coordinator worker/mesa-worker model/main/mesa-train model/main/mesa-data \
  serve/mesa-serve cli/mesactl "$context/.image/bin/"

# A container left by a run that was killed keeps its image, and so the build's pruning, busy.
ctr=mesanet-image-build-test
if bash "$build" buildah containers --format '{{.ContainerName}}' | grep -qx "$ctr"; then
  bash "$build" buildah rm "$ctr" >/dev/null
fi
if ! bash "$build" build "$tag" "$context" >/dev/null 2>"$log"; then
  tail -40 "$log" >&2
  fail "building deploy/Dockerfile failed"
fi
grep '^build_offline.sh: ' "$log"

image_config() {  # FIELD of the image's OCI configuration
  bash "$build" buildah inspect --type image --format "{{.OCIv1.Config.$1}}" "$tag"
}
[ "$(image_config User)" = 10001:10001 ] || fail "the image runs as '$(image_config User)'"
[ "$(image_config WorkingDir)" = /var/lib/mesa ] || fail "workdir '$(image_config WorkingDir)'"

bash "$build" buildah from --pull-never --name "$ctr" "$tag" >/dev/null
trap 'bash "$build" buildah rm "$ctr" >/dev/null' EXIT
bash "$build" buildah copy "$ctr" "$(readlink -f deploy/image/smoke.sh)" /tmp/smoke.sh >/dev/null
# No --user: the image's own. A PID namespace of its own, so that the coordinator and worker
# smoke.sh leaves running die with it.
unshare --pid --fork --mount-proc bash "$build" buildah run --isolation chroot "$ctr" -- \
  bash /tmp/smoke.sh --expect_cudnn
echo "image_build_test: passed in $(($(date +%s) - start)) s"
