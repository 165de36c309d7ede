# Sourced by the export checks' preparation scripts (scripts/fla/make_export_check.sh,
# scripts/gpu/make_remote_code_check.sh): a small real-text corpus from this repository's docs.

# docs_corpus DATA_DIR BIN_DIR: the paragraphs of docs/*.md as JSONL documents, the
# Llama-3-style tokenizer.json beside them, and train/val shards made by BIN_DIR/mesa-data in
# DATA_DIR/shards.
docs_corpus() {
  local data=$1 bin=$2
  mkdir -p "$data"
  python3 - "$data/docs.jsonl" <<'PY'
import glob, json, sys
with open(sys.argv[1], "w") as out:
    for path in sorted(glob.glob("docs/*.md")):
        for para in open(path).read().split("\n\n"):
            if len(para.strip()) > 40:
                out.write(json.dumps({"text": para.strip()}) + "\n")
PY
  cp model/testdata/llama3_style_tokenizer.json "$data/tokenizer.json"
  "$bin/mesa-data" --input="$data/docs.jsonl" --output_dir="$data/shards" --tokenizer=hf \
    --tokenizer_file="$data/tokenizer.json" --val_fraction=0.05 --progress=false > /dev/null
}

# val_windows DATA_DIR OUT: four windows of 128 tokens from the first validation shard (its
# 1,024-byte header skipped; several documents each), one per line of OUT.
val_windows() {
  python3 - "$1" "$2" <<'PY'
import struct, sys, glob
data, out_path = sys.argv[1:]
raw = open(sorted(glob.glob(data + "/shards/val_*.bin"))[0], "rb").read()
width = 4 if struct.unpack("<i", raw[4:8])[0] == 2 else 2
tokens = struct.unpack("<%d%s" % ((len(raw) - 1024) // width, "I" if width == 4 else "H"), raw[1024:])
with open(out_path, "w") as out:
    for i in range(4):
        out.write(" ".join(map(str, tokens[i * 128:(i + 1) * 128])) + "\n")
PY
}
