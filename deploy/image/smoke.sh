#!/usr/bin/env bash
# Runs inside the image (//deploy:image_build_test) or its root file system (//deploy:rootfs_test)
# as the image's user: every binary finds its shared libraries and starts, then a coordinator
# (store in /var/lib/mesa), a worker and mesa-data, and a small training job that must reach
# SUCCEEDED with its checkpoints in /checkpoints, owned by uid 10001; mesa-serve serves one.
set -euo pipefail
fail() {
  echo "smoke.sh: $*" >&2
  for f in /tmp/*.log; do [ -f "$f" ] && { echo "== $f"; tail -20 "$f"; }; done >&2
  exit 1
}
[ "$(id -u)" = 10001 ] || fail "running as uid $(id -u), not 10001"
# --expect_cudnn (the image, not the bare root file system): cuDNN's graph-API libraries sit in the
# binaries' RUNPATH, where the attention kernels dlopen libcudnn.so.9, and everything they need is
# there too (cuDNN loads its other libraries, and NVRTC, from beside itself).
if [ "${1:-}" = --expect_cudnn ]; then
  for f in libcudnn.so.9 libcudnn_graph.so.9 libcudnn_engines_precompiled.so.9 \
    libcudnn_engines_runtime_compiled.so.9 libcudnn_heuristic.so.9 libnvrtc.so.13; do
    lib=/usr/local/cuda/lib64/$f
    [ -f "$lib" ] || fail "$lib missing: attention would run without cuDNN"
    missing=$(ldd "$lib" | grep 'not found' || true)
    [ -z "$missing" ] || fail "$lib: shared libraries missing from the image:"$'\n'"$missing"
  done
fi
# Every binary starts, and every shared library of it comes from the image's packages (or
# CUDA's RUNPATH).
for b in /usr/local/bin/mesa*; do
  # Not `grep -q`: under pipefail, ldd killed by SIGPIPE after an early match reads as no match.
  missing=$(ldd "$b" | grep 'not found' || true)
  [ -z "$missing" ] || fail "$b: shared libraries missing from the image:"$'\n'"$missing"
  start=--version
  [ "$b" != /usr/local/bin/mesactl ] || start=help  # mesactl's version asks the server too
  "$b" "$start" >/tmp/start.log 2>&1 || fail "$b $start failed: $(tail -3 /tmp/start.log)"
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
mesa-worker --coordinator="$MESA_SERVER" --worker_id=smoke --gpus=none --cpu_slots=1 \
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
name: smoke-train
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
echo "smoke.sh: job $id succeeded as uid 10001; checkpoints:"
find /checkpoints -type f | head -5

# mesa-serve on the job's checkpoint answers a completion (bash's /dev/tcp: the image has no curl).
step=$(dirname "$(find /checkpoints -name state.json | head -1)")
mesa-serve --checkpoint="$step" --port=0 --threads=1 --slots=1 >/tmp/serve.out 2>/tmp/serve.log &
serve=$!
port=""
for _ in $(seq 100); do
  port=$(sed -n 's/^listening on port \([0-9]*\)$/\1/p' /tmp/serve.out)
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || fail "mesa-serve did not start"
body='{"prompt": "abc", "max_tokens": 4, "temperature": 0}'
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf 'POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' \
  "${#body}" "$body" >&3
reply=$(cat <&3)
exec 3<&-
grep -q '"finish_reason"' <<<"$reply" || fail "mesa-serve's reply: $reply"
kill -TERM "$serve" && wait "$serve" || fail "mesa-serve did not drain and exit 0"
echo "smoke.sh: mesa-serve answered a completion"
