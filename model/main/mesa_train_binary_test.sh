#!/bin/bash
# Starts the real mesa-data and mesa-train binaries: a run SIGKILLed mid-way resumes with
# bit-identical losses, SIGTERM stops cleanly (checkpoint, "stopped" event, exit 0), and user
# errors exit 2 with an "error" event.
set -euo pipefail
BIN="${TEST_SRCDIR}/${TEST_WORKSPACE}/model/main"
T="${TEST_TMPDIR}"
cd "$T"

# A corpus with structure: lines of counting words.
awk 'BEGIN { srand(7); for (i = 0; i < 3000; i++) { n = int(rand() * 5); s = "";
      for (j = 0; j < 6; j++) s = s sprintf("%s%d ", (j % 2 ? "cat" : "dog"), (n + j) % 5);
      print s } }' > corpus.txt
"$BIN/mesa-data" --input corpus.txt --output_dir data --split line --val_fraction 0.1 \
  --shard_tokens 50000 > data_summary.json
grep -q '"train_shards"' data_summary.json

write_job() {  # $1 = steps, $2 = file, $3 = checkpoint.resume (default: never)
  cat > "$2" <<YAML
name: binary-test
type: train
model: {vocab_size: 257, d_model: 32, n_layers: 1, n_heads: 2, head_dim: 16, cg_steps: 8}
data: {train_path: "$T/data/train_*.bin", val_path: "$T/data/val_*.bin", seq_len: 32, batch_size: 4}
optimizer: {lr: 0.005, warmup_steps: 5}
training: {steps: $1, seed: 3}
checkpoint: {interval_steps: 10, keep_last: 2, resume: ${3:-never}}
YAML
}
write_job 150 job.yaml
write_job 150 job_auto.yaml auto

losses() {  # step -> loss lines of an events file (mesa.v1.TrainerEvent, one JSON per line)
  python3 -c '
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line).get("step")
    if e and not e["skipped"]:
        print(int(e["step"]), repr(e["loss"]))' "$1"
}
wait_for_step() {  # $1 = events file, $2 = step
  for _ in $(seq 1 600); do
    if [[ -f "$1" ]] && grep -q "\"step\":{\"step\":\"$2\"" "$1"; then return 0; fi
    sleep 0.05
  done
  echo "timed out waiting for step $2"; return 1
}

# Reference run, events through an inherited file descriptor (as the worker agent does).
"$BIN/mesa-train" --config job.yaml --workdir full --events_fd 3 --threads 1 3> full.jsonl
grep -q '"result":{' full.jsonl
# training.precision "auto" is fp32 on the CPU.
grep -q '"activations":"fp32"' full.jsonl
grep -q '"precision":"auto"' full.jsonl

# Evaluation of the finished run in CG tolerance mode, with the per-position curves.
sed -e 's/cg_steps: 8}/cg_steps: 8, cg_tol: 0.0001, cg_max_steps: 30}/' job.yaml > eval.yaml
cat >> eval.yaml <<YAML
eval: {checkpoint: "$T/full/checkpoints", per_position: true, max_batches: 5,
       cg_sweep: {fixed_steps: [1, 8], tolerances: [1.0e-2, 1.0e-4], max_steps: 30}}
YAML
"$BIN/mesa-train" --config eval.yaml --eval --workdir full > eval.json
python3 - eval.json <<'PY'
import json, math, sys
result = json.load(open(sys.argv[1]))  # mesa.v1.ResultEvent
r = result["eval"]
assert r["cg_mode"] == "tolerance", r
assert 0 < r["cg_steps_mean"] <= 30, r
assert abs(math.exp(r["val_loss"]) - r["val_perplexity"]) < 1e-6 * r["val_perplexity"], r
assert len(r["mean_nll_so_far"]) == 32 and int(result["step"]) == 150, result
# The CG sweep, on the same batches: its tolerance-1e-4 point is this very evaluation.
sweep = r["cg_sweep"]
assert [(p["cg_mode"], p["cg_max_steps"]) for p in sweep] == [
    ("fixed", 1), ("fixed", 8), ("tolerance", 30), ("tolerance", 30)], sweep
assert sweep[3]["val_loss"] == r["val_loss"] and sweep[3]["cg_steps_mean"] == r["cg_steps_mean"], sweep
assert sweep[0]["cg_steps_mean"] <= 1 and sweep[2]["cg_steps_mean"] <= sweep[3]["cg_steps_mean"], sweep
print("eval:", {k: r[k] for k in ("val_loss", "val_perplexity", "cg_steps_mean")})
PY

# Killed run, then resumed in the same workdir. A run by hand has no job id, so running it again is
# a new run: checkpoint.resume: auto asks to continue (docs/trainer.md, "Resuming").
mkdir -p killed
"$BIN/mesa-train" --config job_auto.yaml --workdir killed --events_file killed.jsonl --threads 1 &
PID=$!
wait_for_step killed.jsonl 25
kill -KILL "$PID"
wait "$PID" || true
grep -q '"checkpoint":{' killed.jsonl
"$BIN/mesa-train" --config job_auto.yaml --workdir killed --events_file resumed.jsonl --threads 1
grep -q '"resumed":{' resumed.jsonl
# Again with the default (never): a fresh run from step 1, not a resume.
"$BIN/mesa-train" --config job.yaml --workdir killed --events_file fresh.jsonl --threads 1 \
  > /dev/null
if grep -q '"resumed":{' fresh.jsonl; then echo "FAIL: a new run resumed"; exit 1; fi
grep -q '"step":{"step":"1"' fresh.jsonl
losses full.jsonl > full_losses.txt
losses resumed.jsonl > resumed_losses.txt
test -s resumed_losses.txt
FIRST=$(head -1 resumed_losses.txt | cut -d' ' -f1)
tail -n +"$FIRST" full_losses.txt > expected.txt
if ! diff expected.txt resumed_losses.txt; then
  echo "FAIL: resumed losses differ from the uninterrupted run"; exit 1
fi
echo "resume after SIGKILL: $(wc -l < resumed_losses.txt) steps bit-identical from step $FIRST"

# SIGTERM: finish the step, checkpoint, "stopped", exit 0.
write_job 100000 long.yaml
"$BIN/mesa-train" --config long.yaml --workdir term --events_file term.jsonl --threads 1 &
PID=$!
wait_for_step term.jsonl 5
kill -TERM "$PID"
set +e; wait "$PID"; CODE=$?; set -e
[[ "$CODE" == 0 ]] || { echo "FAIL: SIGTERM exit code $CODE"; exit 1; }
grep -q '"stopped":{' term.jsonl
grep -q '"reason":"stop"' term.jsonl
test -f term/checkpoints/latest

# Two ranks launched like a worker agent does (MESA_* environment, TCP communicator): each rank
# reads half of every batch, so the losses match the single-process run up to float summation order.
write_job 12 dp.yaml
"$BIN/mesa-train" --config dp.yaml --workdir single --events_file single.jsonl --threads 1
mkdir -p dp/ckpt
for r in 0 1; do
  MESA_RANK=$r MESA_WORLD_SIZE=2 MESA_JOB_ID=dp MESA_ATTEMPT=1 MESA_CHECKPOINT_DIR="$T/dp/ckpt" \
    MESA_COLLECTIVE_TIMEOUT_S=60 "$BIN/mesa-train" --config dp.yaml --workdir dp \
    --events_file "dp_rank$r.jsonl" --threads 1 2> "dp_rank$r.err" &
  eval "PID$r=\$!"
done
wait "$PID0" || { echo "FAIL: rank 0"; cat dp_rank0.err; exit 1; }
wait "$PID1" || { echo "FAIL: rank 1"; cat dp_rank1.err; exit 1; }
grep -q '"communicator":"tcp"' dp_rank0.jsonl
grep -q '"grad_overlap":true' dp_rank0.jsonl
losses single.jsonl > single_losses.txt
losses dp_rank0.jsonl > dp_losses.txt
python3 - single_losses.txt dp_losses.txt <<'PY'
import sys
a = [float(l.split()[1]) for l in open(sys.argv[1])]
b = [float(l.split()[1]) for l in open(sys.argv[2])]
assert len(a) == len(b) == 12, (len(a), len(b))
for i, (x, y) in enumerate(zip(a, b)):
    assert abs(x - y) <= 1e-3 * abs(x), (i + 1, x, y)
print("2 ranks match 1 rank: step 1 %.6f vs %.6f, step 12 %.6f vs %.6f" % (a[0], b[0], a[-1], b[-1]))
PY

# User errors: exit 2 and an "error" event that says so; no checkpoint directory is created.
expect_user_error() {  # $1 = yaml file, then extra flags
  local yaml=$1; shift
  set +e; "$BIN/mesa-train" --config "$yaml" --workdir bad --events_file bad.jsonl "$@" 2> bad.err
  CODE=$?; set -e
  [[ "$CODE" == 2 ]] || { echo "FAIL: $yaml exit code $CODE"; cat bad.err; exit 1; }
  grep -q '"exit_code":"TRAINER_EXIT_USER_ERROR"' bad.jsonl
  [[ ! -e bad/checkpoints ]]
  rm -f bad.jsonl
}
sed 's/d_model: 32/d_model: 0/' job.yaml > bad_model.yaml
expect_user_error bad_model.yaml
grep -q "model.d_model" bad.err
sed "s|$T/data/train_\*.bin|$T/nowhere/*.bin|" job.yaml > missing_data.yaml
expect_user_error missing_data.yaml
sed 's/seq_len: 32/seq_lne: 32/' job.yaml > typo.yaml
expect_user_error typo.yaml
expect_user_error does_not_exist.yaml
sed 's/training: {steps: 150, seed: 3}/training: {steps: 150, seed: 3, precision: fp16}/' job.yaml \
  > bad_precision.yaml
expect_user_error bad_precision.yaml
grep -q "training.precision" bad.err
sed 's/training: {steps: 150, seed: 3}/training: {steps: 150, seed: 3, precision: bf16}/' job.yaml \
  > bf16.yaml
expect_user_error bf16.yaml --device cpu
grep -q 'training.precision: "bf16" needs a CUDA device' bad.err
expect_user_error job.yaml --device gpu
grep -q -- "--device: device must be auto, cpu or cuda, got 'gpu'" bad.err
MESA_GRAD_BUCKET_MB=lots expect_user_error job.yaml
grep -q "MESA_GRAD_BUCKET_MB" bad.err
expect_user_error job.yaml --threads=-1
grep -q -- "--threads must be 0" bad.err

# training.eval_batches larger than the validation data: a warning says how many were used.
sed 's/training: {steps: 150, seed: 3}/training: {steps: 10, seed: 3, eval_interval: 5, eval_batches: 100000}/' \
  job.yaml > many_eval.yaml
"$BIN/mesa-train" --config many_eval.yaml --workdir many_eval --events_fd 3 --threads 1 \
  3> many_eval.jsonl 2> many_eval.err
grep -q '"warning":{"message":"training.eval_batches is 100000, but the validation data holds only' \
  many_eval.jsonl || { echo "FAIL: no eval_batches warning"; cat many_eval.jsonl; exit 1; }

# Under the worker agent (--events_fd) an evaluation's stdout is one summary line; the result is
# the event.
"$BIN/mesa-train" --config eval.yaml --eval --workdir full --events_fd 3 3> eval_events.jsonl \
  > eval_stdout.txt
[[ $(wc -l < eval_stdout.txt) == 1 ]] && grep -q '^result: val_loss ' eval_stdout.txt ||
  { echo "FAIL: eval stdout under --events_fd:"; head -5 eval_stdout.txt; exit 1; }
grep -q '"result":{' eval_events.jsonl
echo PASS
