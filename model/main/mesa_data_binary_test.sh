#!/bin/bash
# The real mesa-data binary on JSONL input: a gzip'd JSONL corpus (the gzip CLI) gives the same
# shards as the same lines in plain text; a malformed line exits 2 naming the file and line and
# leaves the output directory as it was.
set -euo pipefail
BIN="${TEST_SRCDIR}/${TEST_WORKSPACE}/model/main/mesa-data"
cd "${TEST_TMPDIR}"

for i in $(seq 1 300); do printf "document %d: \"quoted\" caf\xc3\xa9\n" "$i"; done > corpus.txt
awk '{ gsub(/"/, "\\\""); printf "{\"id\": %d, \"body\": \"%s\"}\n", NR, $0 }' corpus.txt > corpus.jsonl
gzip -k corpus.jsonl
"$BIN" --input corpus.txt --output_dir plain --split line --val_fraction 0.2 > plain.json
"$BIN" --input corpus.jsonl.gz --output_dir jsonl --text_field body --val_fraction 0.2 > jsonl.json
grep -q '"documents":300' jsonl.json
for f in plain/*.bin; do cmp "$f" "jsonl/$(basename "$f")"; done
[[ $(ls plain | wc -l) == $(ls jsonl | wc -l) ]]

# A bad line 3 in a second run over the same output: exit 2, the line named, shards unchanged.
cp -r jsonl before
{ head -n 2 corpus.jsonl; echo '{"body": 3'; } > bad.jsonl
CODE=0
"$BIN" --input corpus.jsonl.gz,bad.jsonl --output_dir jsonl --text_field body 2> bad.err || CODE=$?
[[ "$CODE" == 2 ]] || { echo "FAIL: exit code $CODE"; cat bad.err; exit 1; }
grep -q 'bad.jsonl, line 3: malformed JSON' bad.err || { cat bad.err; exit 1; }
diff -r before jsonl || { echo "FAIL: the output directory changed"; exit 1; }

# hf: a tokenizer.json whose added token has id 70000: uint32 shards (version 2 in header int 1),
# the tokenizer and its file's SHA-256 recorded in mesa_data.json.
ROOT="${TEST_SRCDIR}/${TEST_WORKSPACE}"
TJ="${ROOT}/model/testdata/tokenizer.json"
"$BIN" --input corpus.txt --output_dir hf --split line --tokenizer hf --tokenizer_file "$TJ" > hf.json
grep -q '"tokenizer":"hf"' hf.json && grep -q '"vocab_size":70001' hf.json
grep -q '"bos_id":264' hf.json && grep -q '"token_bytes":4' hf.json
grep -q "\"sha256\":\"$(sha256sum "$TJ" | cut -c1-64)\"" hf.json || { cat hf.json; exit 1; }
cmp <(tr -d ' \n' < hf/mesa_data.json) <(tr -d ' \n' < hf.json)
[[ $(od -An -t d4 -j 4 -N 4 hf/train_000000.bin | tr -d ' ') == 2 ]]
[[ $(od -An -t d4 -j 4 -N 4 plain/train_000000.bin | tr -d ' ') == 1 ]]
CODE=0
"$BIN" --input corpus.txt --output_dir hf2 --tokenizer hf 2> hf.err || CODE=$?
[[ "$CODE" == 2 ]] && grep -q 'needs --tokenizer_file' hf.err
# gpt2 without its two files names both flags (it said "cannot open : " before).
CODE=0
"$BIN" --input corpus.txt --output_dir gpt2 --tokenizer gpt2 2> gpt2.err || CODE=$?
[[ "$CODE" == 2 ]] && grep -q 'needs --encoder_json and --vocab_bpe' gpt2.err ||
  { echo "FAIL: mesa-data --tokenizer gpt2 without files: exit $CODE"; cat gpt2.err; exit 1; }

# spm: a model trained here; BOS and vocabulary from the model. (mesa-data must not link the
# system protobuf, which clashes with the protobuf-lite inside Debian's libsentencepiece.)
"${ROOT}/model/tokenizer/spm_train_for_test" --input=corpus.txt --model_prefix=tiny \
  --vocab_size=300 --model_type=bpe --character_coverage=1.0 --byte_fallback=true \
  --num_threads=1 --minloglevel=2
"$BIN" --input corpus.txt --output_dir spm --split line --tokenizer spm --tokenizer_file tiny.model \
  > spm.json || { echo "FAIL: mesa-data --tokenizer spm"; exit 1; }
grep -q '"tokenizer":"spm"' spm.json && grep -q '"vocab_size":300' spm.json
grep -q '"bos_id":1' spm.json && grep -q '"token_bytes":2' spm.json
grep -q '"documents":300' spm.json

# Training on SentencePiece shards: mesa-train needs only the shards, their mesa_data.json and the
# model file's hash (it does not load SentencePiece); the checkpoint records the tokenizer. Another
# model file than the shards' is refused before training, naming data.tokenizer_file.
TRAIN="${ROOT}/model/main/mesa-train"
spm_job() {
  cat <<EOF
name: spm
type: train
model: {vocab_size: 300, d_model: 32, n_layers: 1, n_heads: 2, head_dim: 16, cg_steps: 2}
data: {train_path: "$PWD/spm/train_*.bin", seq_len: 16, batch_size: 2, tokenizer: spm, tokenizer_file: "$1"}
optimizer: {lr: 1.0e-3}
training: {steps: 2, seed: 1, device: cpu}
checkpoint: {dir: "$PWD/spm_ckpt"}
EOF
}
spm_job "$PWD/tiny.model" > spm_job.yaml
"$TRAIN" --config spm_job.yaml --workdir spm_run --threads 1 > spm_train.log 2>&1 ||
  { echo "FAIL: mesa-train on spm shards"; cat spm_train.log; exit 1; }
grep -rq '"spm"' spm_ckpt/*/state.json || { echo "FAIL: the checkpoint does not record spm"; exit 1; }
"${ROOT}/model/tokenizer/spm_train_for_test" --input=corpus.jsonl --model_prefix=other \
  --vocab_size=300 --model_type=bpe --character_coverage=1.0 --byte_fallback=true \
  --num_threads=1 --minloglevel=2
spm_job "$PWD/other.model" > spm_other.yaml
CODE=0
"$TRAIN" --config spm_other.yaml --workdir spm_other --threads 1 > spm_other.log 2>&1 || CODE=$?
[[ "$CODE" == 2 ]] && grep -q 'data.tokenizer_file' spm_other.log ||
  { echo "FAIL: another spm model accepted (exit $CODE)"; cat spm_other.log; exit 1; }
echo PASS
