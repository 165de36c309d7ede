#!/bin/bash
# The remote-code export of every mixer (docs/export.md, "Remote code"): four small models trained
# here with the paper recipe (γ cap, logit soft-cap) and resets at document starts cover mesa,
# gla, deltanet, gated_deltanet, attention, swa, mamba2_mesa, mlstm, hawk and mamba2 (untied and
# tied); mesa-export writes each with its own modeling code, whose PyTorch forward
# (scripts/fla/remote_code_check.py: the export's mesa_lm_core.py in float64, without
# transformers) gives our logits (mesa-logits) on rows with a BOS inside. Also: bf16 weights,
# shards with their index, the model card with evaluation results, and the refusals.
set -euo pipefail
BIN="${TEST_SRCDIR}/${TEST_WORKSPACE}/model/main"
ROOT="${TEST_SRCDIR}/${TEST_WORKSPACE}"
T="${TEST_TMPDIR}"
cd "$T"
fail() { echo "FAIL: $*" >&2; exit 1; }
check() { /usr/bin/python3 "$ROOT/scripts/fla/remote_code_check.py" "$@"; }

awk 'BEGIN { srand(3); for (i = 0; i < 300; i++) { s = "";
      for (j = 0; j < 8; j++) s = s sprintf("the %s %s ", (j % 2 ? "token" : "model"),
                                            (rand() < 0.5 ? "reads" : "writes"));
      printf "{\"text\": \"%s\", \"n\": %d}\n", s, i } }' > corpus.jsonl
cp "$ROOT/model/testdata/llama3_style_tokenizer.json" tokenizer.json
"$BIN/mesa-data" --input corpus.jsonl --output_dir data --tokenizer hf \
  --tokenizer_file tokenizer.json --val_fraction 0.1 --progress=false > /dev/null

job() {  # $1: name, $2: model keys, $3: data keys
  cat <<YAML
name: remote-code-$1
model: {vocab_size: 384, d_model: 32, n_layers: 4, n_heads: 2, head_dim: 16, $2}
data: {train_path: "$T/data/train_*.bin", val_path: "$T/data/val_*.bin", tokenizer: hf,
       tokenizer_file: "$T/tokenizer.json", seq_len: 32, batch_size: 4 ${3:-}}
optimizer: {lr: 0.01, warmup_steps: 2}
training: {steps: 8, seed: 3}
YAML
}
job linear "layer_mixers: [mesa, gla, deltanet, gated_deltanet], cg_steps: 30" > linear.yaml
job softmax "layer_mixers: [attention, swa, mamba2_mesa, mlstm], attention_window: 8" > softmax.yaml
job hawk "layer_mixers: [hawk, mesa, hawk, mesa], tie_embeddings: false" \
  ", reset_at_bos: false" > hawk.yaml
job ssd "layer_mixers: [mamba2, hawk, mamba2, mesa], ssm_expand: 2, ssm_head_dim: 16,
  ssm_state_dim: 16" > ssd.yaml
# Two rows of 40 tokens, each with a second document starting at position 17.
awk 'BEGIN { srand(5); for (r = 0; r < 2; r++) { s = "374";
      for (i = 1; i < 40; i++) s = s " " (i == 17 ? 374 : int(rand() * 374)); print s } }' \
  > tokens.txt

for m in linear softmax hawk ssd; do
  "$BIN/mesa-train" --config $m.yaml --workdir $m --threads 2 > $m.log 2>&1 \
    || fail "training $m: $(tail -3 $m.log)"
  "$BIN/mesa-export" --checkpoint $m/checkpoints --out $m.hf > $m.export
  grep -q "(remote_code; FLA's format would differ" $m.export || fail "$m: $(cat $m.export)"
  for f in config.json model.safetensors generation_config.json tokenizer.json README.md \
           configuration_mesa_lm.py modeling_mesa_lm.py mesa_lm_core.py; do
    [ -f "$m.hf/$f" ] || fail "$m.hf/$f missing"
  done
  "$BIN/mesa-logits" --checkpoint $m/checkpoints --tokens tokens.txt --out $m.ours.safetensors
  check $m.hf tokens.txt $m.ours.safetensors --max_abs_diff 1e-4
done
grep -q '"reset_at_bos": true' linear.hf/config.json || fail "linear: resets not exported"
grep -q '"reset_at_bos": false' hawk.hf/config.json || fail "hawk: resets exported"
grep -q '"auto_map"' linear.hf/config.json || fail "no auto_map"
grep -q "Layers, in order: mesa, gla, deltanet, gated_deltanet. γ cap 0.0025, logit soft-cap 30" \
  linear.hf/README.md || fail "model card: $(head -30 linear.hf/README.md)"

# The check fails for a model that computes something else: resets off in the config.
cp -r linear.hf flipped.hf
sed 's/"reset_at_bos": true/"reset_at_bos": false/' linear.hf/config.json > flipped.hf/config.json
if check flipped.hf tokens.txt linear.ours.safetensors --max_abs_diff 1e-4 > wrong.out; then
  fail "a model without resets matched: $(cat wrong.out)"
fi

# bf16 weights in shards of at most 40KB, with the index naming every tensor's shard.
"$BIN/mesa-export" --checkpoint softmax/checkpoints --out shards.hf --dtype bf16 \
  --max_shard_size 40KB > /dev/null
[ -f shards.hf/model.safetensors.index.json ] || fail "no index: $(ls shards.hf)"
[ ! -e shards.hf/model.safetensors ] || fail "a single file beside the shards"
n=$(ls shards.hf | grep -c '^model-000[0-9][0-9]-of-000[0-9][0-9].safetensors$')
[ "$n" -ge 3 ] || fail "$n shards: $(ls shards.hf)"
for f in shards.hf/model-*.safetensors; do
  [ "$(stat -c %s "$f")" -le 60000 ] || fail "$f is $(stat -c %s "$f") bytes"
done
grep -q '"bfloat16"' shards.hf/config.json || fail "torch_dtype is not bfloat16"
check shards.hf tokens.txt softmax.ours.safetensors --max_abs_diff 0.5 --dtype float32

# Back in: mesa-import reads a remote-code export (tied and untied, single file and bf16 shards)
# into a checkpoint root whose logits are the exported model's, and a job fine-tunes from it.
same_logits() {  # $1, $2: mesa-logits outputs; equal to the last bit
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, struct, sys
def logits(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    meta = json.loads(raw[8:8 + n])["logits"]
    begin, end = meta["data_offsets"]
    return raw[8 + n + begin:8 + n + end]
sys.exit(0 if logits(sys.argv[1]) == logits(sys.argv[2]) else 1)
PY
}
for m in linear hawk; do
  "$BIN/mesa-import" --hf_dir $m.hf --out $m.imported > $m.import.json
  "$BIN/mesa-logits" --checkpoint $m.imported --tokens tokens.txt --out $m.imported.safetensors
  same_logits $m.ours.safetensors $m.imported.safetensors || fail "$m: the import computes otherwise"
done
grep -Eq '"tie_embeddings": ?false' hawk.import.json || fail "hawk import is tied: $(cat hawk.import.json)"
"$BIN/mesa-import" --hf_dir shards.hf --out shards.imported > /dev/null
"$BIN/mesa-logits" --checkpoint shards.imported --tokens tokens.txt --out shards.imported.safetensors
check shards.hf tokens.txt shards.imported.safetensors --max_abs_diff 1e-4 --dtype float32
{ sed 's/steps: 8,/steps: 4,/' hawk.yaml; echo "checkpoint: {init_from: \"$T/hawk.imported\"}"; } \
  > finetune.yaml
"$BIN/mesa-train" --config finetune.yaml --workdir finetune --threads 2 > finetune.log 2>&1 \
  || fail "fine-tuning from the import: $(tail -3 finetune.log)"
[ -f finetune/checkpoints/step_00000004/state.json ] || fail "fine-tuning wrote no checkpoint"

# The model card carries an EVAL job's results (as `mesactl get --json` prints the job).
cat > eval.json <<'JSON'
{"id": "j-7", "spec": {"name": "val", "type": "JOB_TYPE_EVAL"},
 "result": {"datasets": [{"name": "held-out", "seq_len": 32, "loss": 2.5, "perplexity": 12.18,
                          "tokens": 640}],
            "tasks": [{"name": "piqa", "scored": 10, "primary_metric": "acc",
                       "metrics": [{"name": "acc", "value": 0.6, "stderr": 0.16}]}]}}
JSON
"$BIN/mesa-export" --checkpoint hawk/checkpoints --out card.hf --eval_results eval.json > /dev/null
grep -q "| held-out | 32 | 640 | 2.5000 | 12.180 |" card.hf/README.md || fail "$(cat card.hf/README.md)"
grep -q "| piqa | 0 | 10 | acc \* | 0.6000 | 0.1600 |" card.hf/README.md || fail "no task row"

# Refusals: exit 2, nothing written.
echo '{"id": "j-8", "spec": {"type": "JOB_TYPE_TRAIN"}}' > train.json
for args in "--eval_results train.json" "--format fla" "--format onnx" "--max_shard_size 5XB"; do
  rc=0
  # shellcheck disable=SC2086
  "$BIN/mesa-export" --checkpoint linear/checkpoints --out refused.hf $args 2> refused.err || rc=$?
  [ "$rc" = 2 ] || fail "$args exited $rc: $(cat refused.err)"
  [ ! -e refused.hf ] || fail "$args wrote refused.hf"
  [ "$(wc -l < refused.err)" = 1 ] || fail "$args: not one line: $(cat refused.err)"
done
grep -q "expected a size from 1KB to 1000GB" refused.err || fail "$(cat refused.err)"
"$BIN/mesa-export" --checkpoint linear/checkpoints --out refused.hf --format fla 2> fla.err || true
grep -q "layer 1 is gla" fla.err && grep -q "data.reset_at_bos" fla.err || fail "$(cat fla.err)"
echo PASS
