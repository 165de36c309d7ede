#!/bin/bash
# The Llama-3-style tokenizer.json path through the real binaries, then the export: mesa-data
# tokenises a JSONL corpus with it, mesa-train trains an FLA-compatible model (no γ cap, no
# soft-cap) and records the tokenizer, mesa-generate decodes with the recorded tokenizer.json (and
# refuses another), mesa-export writes the Hugging Face directory, whose logits under FLA's
# function (scripts/fla/reference_forward.py, NumPy float64) equal ours (mesa-logits); a model
# with the soft-cap is refused, and an existing output directory is left alone.
set -euo pipefail
BIN="${TEST_SRCDIR}/${TEST_WORKSPACE}/model/main"
ROOT="${TEST_SRCDIR}/${TEST_WORKSPACE}"
T="${TEST_TMPDIR}"
cd "$T"
fail() { echo "FAIL: $*" >&2; exit 1; }

awk 'BEGIN { srand(3); for (i = 0; i < 400; i++) { s = "";
      for (j = 0; j < 8; j++) s = s sprintf("the %s %s ", (j % 2 ? "token" : "model"),
                                            (rand() < 0.5 ? "reads" : "writes"));
      printf "{\"text\": \"%s\", \"n\": %d}\n", s, i } }' > corpus.jsonl
cp "$ROOT/model/testdata/llama3_style_tokenizer.json" tokenizer.json
"$BIN/mesa-data" --input corpus.jsonl --output_dir data --tokenizer hf \
  --tokenizer_file tokenizer.json --val_fraction 0.1 --progress=false > summary.json
grep -q '"bos_id":374' summary.json || fail "BOS is not <|begin_of_text|>: $(cat summary.json)"

job() {  # $1: extra model keys
  cat <<YAML
name: export-test
model: {vocab_size: 384, d_model: 32, n_layers: 2, n_heads: 2, head_dim: 16, cg_steps: 30 $1}
data: {train_path: "$T/data/train_*.bin", val_path: "$T/data/val_*.bin", tokenizer: hf,
       tokenizer_file: "$T/tokenizer.json", seq_len: 32, batch_size: 4, reset_at_bos: false}
optimizer: {lr: 0.01, warmup_steps: 2}
training: {steps: 20, seed: 3}
YAML
}
job ", gamma_cap: 0, logit_softcap: 0" > fla.yaml
job "" > capped.yaml
"$BIN/mesa-train" --config fla.yaml --workdir fla --threads 2 > /dev/null
"$BIN/mesa-train" --config capped.yaml --workdir capped --threads 2 > /dev/null
grep -q '"kind": "hf"' fla/checkpoints/step_00000020/state.json || fail "no tokenizer record"

# Generation decodes with the recorded tokenizer.json; another file is refused.
"$BIN/mesa-generate" --checkpoint fla/checkpoints --prompt "the model" --max_new_tokens 8 \
  --temperature 0 --threads 2 --json > gen.json
grep -q '"completion"' gen.json || fail "no completion: $(cat gen.json)"
cp "$ROOT/model/testdata/tokenizer.json" other.json
if "$BIN/mesa-generate" --checkpoint fla/checkpoints --prompt "the" --tokenizer_file other.json \
     --threads 2 2> gen.err; then fail "another tokenizer.json was accepted"; fi
grep -q "is not the one the checkpoint was trained with" gen.err || fail "$(cat gen.err)"

# Export and FLA's function.
"$BIN/mesa-export" --checkpoint fla/checkpoints --out hf > /dev/null
for f in config.json model.safetensors generation_config.json tokenizer.json \
         tokenizer_config.json special_tokens_map.json; do
  [ -f "hf/$f" ] || fail "hf/$f missing"
done
awk 'BEGIN { srand(5); for (r = 0; r < 2; r++) { s = "374";
      for (i = 1; i < 24; i++) s = s " " int(rand() * 374); print s } }' > tokens.txt
"$BIN/mesa-logits" --checkpoint fla/checkpoints --tokens tokens.txt --out ours.safetensors
/usr/bin/python3 "$ROOT/scripts/fla/reference_forward.py" hf tokens.txt ours.safetensors \
  --max_abs_diff 1e-3
# An unknown --device is a usage error (exit 2), never taken for "auto" or "cpu".
rc=0
"$BIN/mesa-logits" --checkpoint fla/checkpoints --tokens tokens.txt --out bad.safetensors \
  --device gpu 2> bad_device.err || rc=$?
[ "$rc" = 2 ] || fail "mesa-logits --device gpu exited $rc"
grep -q "device must be auto, cpu or cuda, got 'gpu'" bad_device.err || fail "$(cat bad_device.err)"
[ ! -e bad.safetensors ] || fail "mesa-logits --device gpu wrote its output"
# --precision takes exactly training.precision's names (spec/precision.h): anything else is a
# usage error, never fp32; bf16 on the CPU (fp32 activations only) is refused too.
rc=0
"$BIN/mesa-logits" --checkpoint fla/checkpoints --tokens tokens.txt --out bad.safetensors \
  --precision fp16 2> bad_precision.err || rc=$?
[ "$rc" = 2 ] || fail "mesa-logits --precision fp16 exited $rc"
[ "$(wc -l < bad_precision.err)" = 1 ] || fail "not one line: $(cat bad_precision.err)"
grep -q "^mesa-logits: --precision: precision must be auto, bf16 or fp32, got 'fp16'$" \
  bad_precision.err || fail "$(cat bad_precision.err)"
rc=0
"$BIN/mesa-logits" --checkpoint fla/checkpoints --tokens tokens.txt --out bad.safetensors \
  --device cpu --precision bf16 2> bf16_cpu.err || rc=$?
[ "$rc" = 2 ] || fail "mesa-logits --device cpu --precision bf16 exited $rc"
grep -q -- "--precision bf16 needs a CUDA device" bf16_cpu.err || fail "$(cat bf16_cpu.err)"
[ ! -e bad.safetensors ] || fail "a refused --precision wrote its output"
# "auto" on the CPU is fp32: the same logits as the default.
"$BIN/mesa-logits" --checkpoint fla/checkpoints --tokens tokens.txt --out auto.safetensors \
  --precision auto
cmp -s auto.safetensors ours.safetensors || fail "--precision auto on the CPU differs from fp32"

# An untied model (model.tie_embeddings: false, FLA's own convention): its export is FLA's
# function too, and as FLA's checkpoints have (an independent lm_head.weight), mesa-import takes
# it back untied and mesa-train fine-tunes it through checkpoint.init_from.
job ", gamma_cap: 0, logit_softcap: 0, tie_embeddings: false" > untied.yaml
"$BIN/mesa-train" --config untied.yaml --workdir untied --threads 2 > untied.log 2>&1
grep -Eq '"tie_embeddings": ?false' untied/checkpoints/step_00000020/state.json \
  || fail "untied checkpoint does not record tie_embeddings false"
"$BIN/mesa-export" --checkpoint untied/checkpoints --out untied_hf > /dev/null
grep -Eq '"tie_word_embeddings": ?false' untied_hf/config.json || fail "untied config.json"
"$BIN/mesa-logits" --checkpoint untied/checkpoints --tokens tokens.txt --out untied.safetensors
/usr/bin/python3 "$ROOT/scripts/fla/reference_forward.py" untied_hf tokens.txt \
  untied.safetensors --max_abs_diff 1e-3
"$BIN/mesa-import" --hf_dir untied_hf --out untied_import > import.json
grep -Eq '"tie_embeddings": ?false' import.json || fail "import is not untied: $(cat import.json)"
{ job ", gamma_cap: 0, logit_softcap: 0, tie_embeddings: false";
  echo "checkpoint: {init_from: \"$T/untied_import\"}"; } > finetune.yaml
"$BIN/mesa-train" --config finetune.yaml --workdir finetune --threads 2 > finetune.log 2>&1
[ -f finetune/checkpoints/step_00000020/state.json ] || fail "fine-tuning wrote no checkpoint"
# Started from the trained weights, the fine-tune's first loss is below the untied run's first.
first_loss() { grep -o 'step 1/20 loss [0-9.]*' "$1" | awk '{ print $4 }'; }
awk -v a="$(first_loss finetune.log)" -v b="$(first_loss untied.log)" \
  'BEGIN { exit !(a != "" && b != "" && a + 0.5 < b + 0) }' \
  || fail "fine-tune did not start from the import: first loss $(first_loss finetune.log) vs $(first_loss untied.log)"
# A tied job cannot take the untied import: the model sections differ.
{ job ", gamma_cap: 0, logit_softcap: 0"; echo "checkpoint: {init_from: \"$T/untied_import\"}"; } \
  > mismatch.yaml
if "$BIN/mesa-train" --config mismatch.yaml --workdir mismatch --threads 2 > /dev/null \
     2> mismatch.err; then fail "a tied job fine-tuned an untied checkpoint"; fi
grep -q "tie_embeddings" mismatch.err || fail "$(cat mismatch.err)"

# Refusals: exit 2 and nothing written. FLA's format is refused for the soft-capped model (auto
# exports it as remote code instead: //model/main:remote_code_export_test).
set +e
"$BIN/mesa-export" --checkpoint capped/checkpoints --out capped_hf --format fla 2> capped.err
rc=$?
set -e
[ "$rc" = 2 ] || fail "soft-capped export exited $rc"
grep -q "model.logit_softcap is 30" capped.err || fail "$(cat capped.err)"
grep -q -- "--format=remote_code" capped.err || fail "no way out named: $(cat capped.err)"
[ ! -e capped_hf ] || fail "a refused export wrote capped_hf"
"$BIN/mesa-export" --checkpoint capped/checkpoints --out capped_auto > capped_auto.out
grep -q "(remote_code; FLA's format would differ: .*model.logit_softcap is 30" capped_auto.out \
  || fail "auto did not say why it chose remote code: $(cat capped_auto.out)"
grep -q '"model_type": "mesa_lm"' capped_auto/config.json || fail "auto: not remote code"
set +e
"$BIN/mesa-export" --checkpoint fla/checkpoints --out hf 2> again.err
rc=$?
set -e
[ "$rc" = 2 ] || fail "export over an existing directory exited $rc"
echo PASS
