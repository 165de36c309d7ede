#!/bin/bash
# Trains a tiny Mesa model with the real mesa-train, then generates from its checkpoint with the
# real mesa-generate: greedy text follows the corpus, tolerance CG decodes with fewer steps and the
# same log-likelihood as fixed steps, seeds reproduce, several prompts come back in order, bad
# input exits 2 with a message, and damaged checkpoints are skipped with a warning (mesa-logits too).
set -euo pipefail
BIN="${TEST_SRCDIR}/${TEST_WORKSPACE}/model/main"
T="${TEST_TMPDIR}"
cd "$T"

awk 'BEGIN { srand(7); for (i = 0; i < 3000; i++) { n = int(rand() * 5); s = "";
      for (j = 0; j < 6; j++) s = s sprintf("%s%d ", (j % 2 ? "cat" : "dog"), (n + j) % 5);
      print s } }' > corpus.txt
"$BIN/mesa-data" --input corpus.txt --output_dir data --split line --val_fraction 0.1 \
  --shard_tokens 50000 > /dev/null
cat > job.yaml <<YAML
name: generate-test
type: train
model: {vocab_size: 257, d_model: 32, n_layers: 2, n_heads: 2, head_dim: 16, cg_steps: 8}
data: {train_path: "$T/data/train_*.bin", val_path: "$T/data/val_*.bin", seq_len: 64, batch_size: 8}
optimizer: {lr: 0.01, warmup_steps: 10}
training: {steps: 200, seed: 3}
checkpoint: {interval_steps: 100, keep_last: 1}
YAML
"$BIN/mesa-train" --config job.yaml --workdir run --threads 2 > /dev/null
CKPT="$T/run/checkpoints"

gen() { "$BIN/mesa-generate" --checkpoint "$CKPT" --threads 2 --json "$@"; }
gen --prompt "dog1 cat2 " --max_new_tokens 24 --temperature 0 > fixed.json
gen --prompt "dog1 cat2 " --max_new_tokens 24 --temperature 0 --cg_tol 1e-4 > tol.json
gen --prompt "dog3 " --max_new_tokens 16 --temperature 0.8 --top_k 20 --seed 9 > seeded1.json
gen --prompt "dog3 " --max_new_tokens 16 --temperature 0.8 --top_k 20 --seed 9 > seeded2.json
printf '{"prompt": "cat4 "}\n\n{"prompt": "dog0 cat1 dog2 "}\n' > prompts.jsonl
gen --prompts prompts.jsonl --max_new_tokens 8 --temperature 0 --stop "\n" > many.json
python3 - <<'PY'
import json
fixed = json.loads(open("fixed.json").read())
tol = json.loads(open("tol.json").read())
assert len(fixed["tokens"]) == 24 and fixed["finish_reason"] == "length", fixed
# The model learned the corpus: greedy text continues with its words.
assert "cat" in fixed["completion"] and "dog" in fixed["completion"], fixed["completion"]
assert 29 < fixed["cg_steps_mean"] <= 30, fixed["cg_steps_mean"]
assert 0 < tol["cg_steps_mean"] < 0.9 * fixed["cg_steps_mean"], tol["cg_steps_mean"]
assert tol["tokens"] == fixed["tokens"], (tol["completion"], fixed["completion"])
# Per token, every head of both Mesa layers; in tolerance mode their mean is the token's mean.
by = tol["cg_steps_by_layer_head"]
assert len(by) == 24 and all(len(t) == 2 and all(len(l) == 2 for l in t) for t in by), by[:2]
for t, mean in zip(by, tol["cg_steps"]):
    flat = [n for layer in t for n in layer]
    assert abs(sum(flat) / len(flat) - mean) < 1e-9 and max(flat) <= 30, (t, mean)
fixed_counts = [n for t in fixed["cg_steps_by_layer_head"] for l in t for n in l]
assert max(fixed_counts) == 30 and sum(fixed_counts) / len(fixed_counts) > 29, fixed_counts
nll_fixed = -sum(fixed["logprobs"]) / len(fixed["logprobs"])
nll_tol = -sum(tol["logprobs"]) / len(tol["logprobs"])
assert abs(nll_fixed - nll_tol) < 1e-3, (nll_fixed, nll_tol)
assert open("seeded1.json").read() == open("seeded2.json").read()
many = [json.loads(l) for l in open("many.json")]
assert [m["prompt"] for m in many] == ["cat4 ", "dog0 cat1 dog2 "], many
for m in many:
    assert len(m["tokens"]) == len(m["logprobs"]) == len(m["cg_steps"]) <= 8, m
    assert "\n" not in m["completion"], m
print("fixed: %r (cg %.1f, nll %.4f); tolerance: cg %.2f, nll %.4f" %
      (fixed["completion"], fixed["cg_steps_mean"], nll_fixed, tol["cg_steps_mean"], nll_tol))
PY

# Text mode prints prompt + completion.
"$BIN/mesa-generate" --checkpoint "$CKPT" --prompt "dog1 " --max_new_tokens 5 --temperature 0 \
  --threads 1 2> text.err | grep -q "^dog1 "

expect_exit2() {  # message, args...
  local message=$1
  shift
  local rc=0
  "$BIN/mesa-generate" "$@" > out.txt 2> err.txt || rc=$?
  if [[ $rc -ne 2 ]] || ! grep -q -- "$message" err.txt; then
    echo "expected exit 2 with '$message' for: $*; got $rc:"; cat err.txt; exit 1
  fi
}
expect_exit2 "does not exist" --checkpoint "$T/nowhere" --prompt x
printf '{"prompt": "x"}\n{"prompt": ""}\n' > empty.jsonl
expect_exit2 "prompt 1 is empty" --checkpoint "$CKPT" --prompts empty.jsonl
expect_exit2 "exactly one of" --checkpoint "$CKPT"
printf '{"prompt": "ok"}\n{"text": "no"}\n' > bad.jsonl
expect_exit2 "bad.jsonl:2" --checkpoint "$CKPT" --prompts bad.jsonl
expect_exit2 "max_new_tokens" --checkpoint "$CKPT" --prompt x --max_new_tokens 0
expect_exit2 "temperature" --checkpoint "$CKPT" --prompt x --temperature -1
expect_exit2 "--device: device must be auto, cpu or cuda, got 'tpu'" --checkpoint "$CKPT" --prompt x \
  --device tpu
expect_exit2 "--prompt is empty" --checkpoint "$CKPT" --prompt ""
expect_exit2 "--threads must be 0" --checkpoint "$CKPT" --prompt x --threads=-1

# One checkpoint policy for every tool (docs/formats.md, "Reading"): a damaged newest step is
# skipped with a warning naming it, never silently; a FIFO or a link to /dev/zero where the weights
# should be is refused at once (timeout: it used to hang forever); a step named explicitly is not
# skipped.
STEP=$(basename "$(ls -d "$CKPT"/step_* | tail -1)")
mkdir -p policy
cp -r "$CKPT/$STEP" policy/step_00000100
cp -r "$CKPT/$STEP" policy/step_00000999
printf 'step_00000999' > policy/latest
printf '1 2 3\r\n4 5 6\r\n' > crlf_tokens.txt  # CRLF and a tab-free but Windows-style file
damage_and_check() {  # $1 = what the warning must say
  local rc=0
  timeout 60 "$BIN/mesa-generate" --checkpoint policy --prompt "dog1 " --max_new_tokens 2 \
    --temperature 0 --threads 1 > out.txt 2> err.txt || rc=$?
  [[ $rc == 0 ]] && grep -q "warning: skipped a damaged checkpoint: .*step_00000999.*$1" err.txt ||
    { echo "FAIL mesa-generate ($1): exit $rc"; cat err.txt; exit 1; }
  rc=0
  timeout 60 "$BIN/mesa-logits" --checkpoint policy --tokens crlf_tokens.txt --out logits.st \
    > out.txt 2> err.txt || rc=$?
  [[ $rc == 0 ]] && grep -q "warning: skipped a damaged checkpoint: .*step_00000999.*$1" err.txt ||
    { echo "FAIL mesa-logits ($1): exit $rc"; cat err.txt; exit 1; }
  rc=0
  timeout 60 "$BIN/mesa-generate" --checkpoint policy/step_00000999 --prompt x > out.txt \
    2> err.txt || rc=$?
  [[ $rc == 2 ]] && grep -q "$1" err.txt ||
    { echo "FAIL explicit step ($1): exit $rc"; cat err.txt; exit 1; }
  rm -rf policy/step_00000999
  cp -r "$CKPT/$STEP" policy/step_00000999
}
printf 'x' | dd of=policy/step_00000999/model.safetensors bs=1 seek=200 conv=notrunc 2> /dev/null
damage_and_check "checksum"
: > policy/step_00000999/state.json
damage_and_check "state.json"
rm policy/step_00000999/model.safetensors && mkfifo policy/step_00000999/model.safetensors
damage_and_check "not a regular file (a FIFO)"
rm policy/step_00000999/model.safetensors && ln -s /dev/zero policy/step_00000999/model.safetensors
damage_and_check "not a regular file (a character device)"

# mesa-logits checks its output path before any work.
rc=0
"$BIN/mesa-logits" --checkpoint "$CKPT" --tokens crlf_tokens.txt --out "$T/no/such/dir/x.st" \
  2> err.txt || rc=$?
[[ $rc == 2 ]] && grep -q -- "--out: the directory $T/no/such/dir does not exist" err.txt ||
  { echo "FAIL: mesa-logits --out in a missing directory: exit $rc"; cat err.txt; exit 1; }
echo PASS
