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
echo PASS
