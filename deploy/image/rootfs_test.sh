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
  cli/mesactl "$root/tmp/mesa-bin/"
chroot "$root" sh /usr/local/lib/mesa/install.sh binaries /tmp/mesa-bin
rm -rf "$root/tmp/mesa-bin"

# What runs inside, as the image's user.
cat >"$root/tmp/run.sh" <<'INNER'
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin  # chroot, mmdebstrap helpers (Bazel passes /usr/bin:/bin)
fail() {
  echo "rootfs_test (inside): $*" >&2
  for f in /tmp/*.log; do [ -f "$f" ] && { echo "== $f"; tail -20 "$f"; }; done >&2
  exit 1
}
[ "$(id -u)" = 10001 ] || fail "running as uid $(id -u), not 10001"
# Every shared library of every binary comes from the image's packages (or CUDA's RUNPATH).
for b in /usr/local/bin/mesa*; do
  if ldd "$b" | grep -q 'not found'; then
    ldd "$b" | grep 'not found' >&2
    fail "$b: shared libraries missing from the image"
  fi
done
wait_line() {  # FILE PREFIX: prints what follows PREFIX on the first such line of FILE
  for _ in $(seq 300); do
    line=$(grep -m1 "^$2" "$1" 2>/dev/null || true)
    if [ -n "$line" ]; then echo "${line#"$2"}"; return 0; fi
    sleep 0.1
  done
  fail "no \"$2\" line in $1"
}
mesa-coordinator --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --db=/var/lib/mesa/jobs.db \
  --checkpoint_root=/checkpoints --data_roots=/var/lib/mesa/data \
  >/tmp/coordinator.out 2>/tmp/coordinator.log &
export MESA_SERVER
MESA_SERVER=$(wait_line /tmp/coordinator.out "listening on ")
mesa-worker --coordinator="$MESA_SERVER" --worker_id=rootfs --gpus=none --cpu_slots=1 \
  --workdir=/var/lib/mesa/work --checkpoint_root=/checkpoints --metrics_listen=127.0.0.1:0 \
  >/tmp/worker.out 2>/tmp/worker.log &
wait_line /tmp/worker.out "metrics on " >/dev/null
# A small corpus, byte-level shards made by the image's mesa-data.
mkdir -p /tmp/corpus /var/lib/mesa/data
for i in $(seq 400); do
  echo "the mesa layer solves a regularised least squares problem at step $i of the scan."
done >/tmp/corpus/text.txt
mesa-data --input=/tmp/corpus/text.txt --output_dir=/var/lib/mesa/data --tokenizer=byte \
  --split=line --val_fraction=0.1 --seed=1 --progress=false >/tmp/data.log 2>&1 ||
  fail "mesa-data failed"
cat >/tmp/job.yaml <<JOB
name: rootfs-train
type: train
resources: {gpus: 0, cpu_threads: 1}
model: {vocab_size: 257, d_model: 32, n_layers: 1, n_heads: 2, head_dim: 16, mixer: mesa, cg_steps: 4}
data: {train_path: /var/lib/mesa/data/train_*.bin, val_path: /var/lib/mesa/data/val_*.bin, tokenizer: byte, seq_len: 64, batch_size: 4}
optimizer: {lr: 3.0e-3, warmup_steps: 2}
training: {steps: 10, seed: 1, device: cpu, log_interval: 5, eval_batches: 2}
checkpoint: {interval_steps: 5, keep_last: 2}
JOB
id=$(mesactl --json submit /tmp/job.yaml | sed -n 's/.*"id": *"\([^"]*\)".*/\1/p' | head -1)
[ -n "$id" ] || fail "submit printed no job id"
mesactl watch "$id" >/tmp/watch.log 2>&1 || fail "job $id did not succeed: $(tail -5 /tmp/watch.log)"
[ -n "$(find /checkpoints -type f -user 10001 | head -1)" ] || fail "no checkpoint written as 10001"
[ "$(stat -c %u /var/lib/mesa/jobs.db)" = 10001 ] || fail "job store not owned by 10001"
echo "rootfs_test (inside): job $id succeeded as uid 10001; checkpoints:"
find /checkpoints -type f | head -5
INNER

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
