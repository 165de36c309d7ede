#!/usr/bin/env bash
# Here (CPU): trains a small FLA-compatible MesaNet (no γ cap, no soft-cap) on this repository's
# docs as a JSONL corpus tokenised with the Llama-3-style tokenizer.json, exports it with
# mesa-export, and writes the token sequences the logits are compared on: everything
# scripts/fla/fla_export_check.sh needs on the GPU machine, in DIR (default .device/export/check).
#   bash scripts/fla/make_export_check.sh [DIR]
# TIE_EMBEDDINGS=false trains an untied model (own lm_head.weight, unscaled lookup: FLA's own
# convention) instead; fla_export_check.sh and compare_logits.py read either export as it is.
# Both were run on an H100 (docs/export.md, "Logits against FLA on a GPU").
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-.device/export/check}
bin=bazel-bin/model/main
bazel build --config=cuda --local_cpu_resources=1 //model/main:mesa-data //model/main:mesa-train \
  //model/main:mesa-export //model/main:mesa-logits
rm -rf "$dir"
source scripts/docs_corpus.sh
docs_corpus "$dir/data" "$bin"
cat > "$dir/train.yaml" <<YAML
name: fla-export-check
model:
  vocab_size: 384
  d_model: 128
  n_layers: 2
  n_heads: 2
  head_dim: 64
  mixer: mesa
  cg_steps: 30
  gamma_cap: 0        # FLA computes gamma = sigmoid(a) (docs/export.md)
  logit_softcap: 0    # FLA's logits are not soft-capped
  tie_embeddings: ${TIE_EMBEDDINGS:-true}
data:
  train_path: $PWD/$dir/data/shards/train_*.bin
  val_path: $PWD/$dir/data/shards/val_*.bin
  tokenizer: hf
  tokenizer_file: $PWD/$dir/data/tokenizer.json
  reset_at_bos: false   # FLA's model carries its state across documents
  seq_len: 128
  batch_size: 8
optimizer:
  lr: 3.0e-3
  warmup_steps: 10
training:
  steps: 80
  device: cpu
  seed: 1
  log_interval: 20
checkpoint:
  dir: $PWD/$dir/checkpoints
YAML
"$bin/mesa-train" --config="$dir/train.yaml" --workdir="$dir"
"$bin/mesa-export" --checkpoint="$dir/checkpoints" --out="$dir/hf"
val_windows "$dir/data" "$dir/tokens.txt"
"$bin/mesa-logits" --checkpoint="$dir/checkpoints" --tokens="$dir/tokens.txt" \
  --out="$dir/logits_cpu_here.safetensors"
du -sh "$dir"
