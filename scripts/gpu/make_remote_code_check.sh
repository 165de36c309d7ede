#!/usr/bin/env bash
# Here (CPU): everything scripts/gpu/remote_code_check.sh needs on the GPU machine, in DIR
# (default .device/remote_code): five small models trained on this repository's docs (JSONL,
# the Llama-3-style tokenizer.json) that between them have every mixer — the paper recipe
# (Mesa, γ cap, logit soft-cap, resets at BOS), the linear recurrences, attention/SWA/mLSTM,
# Hawk-MesaNet (untied), Mamba-2 with Hawk and mLSTM —, each exported by mesa-export (remote
# code; the sixth, an FLA-exact Mesa, in FLA's format), the token rows (with document starts
# inside), our logits on them (mesa-logits) and our greedy continuations (mesa-generate).
#   bash scripts/gpu/make_remote_code_check.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-.device/remote_code}
bin=bazel-bin/model/main
bazel build --local_cpu_resources=2 //model/main:mesa-data //model/main:mesa-train \
  //model/main:mesa-export //model/main:mesa-logits //model/main:mesa-generate
rm -rf "$dir"
mkdir -p "$dir/work"
source scripts/docs_corpus.sh
docs_corpus "$dir/data" "$bin"
job() {  # $1 name, $2 model keys, $3 data keys
  cat <<YAML
name: remote-code-$1
model: {vocab_size: 384, d_model: 64, n_layers: 4, n_heads: 2, head_dim: 32, $2}
data: {train_path: "$PWD/$dir/data/shards/train_*.bin", val_path: "$PWD/$dir/data/shards/val_*.bin",
       tokenizer: hf, tokenizer_file: "$PWD/$dir/data/tokenizer.json", seq_len: 128,
       batch_size: 8 ${3:-}}
optimizer: {lr: 3.0e-3, warmup_steps: 5}
training: {steps: 40, seed: 1, log_interval: 40}
YAML
}
job paper "layer_mixers: [mesa, mesa, mesa, mesa]" > "$dir/work/paper.yaml"
job linear "layer_mixers: [gla, deltanet, gated_deltanet, mamba2_mesa]" > "$dir/work/linear.yaml"
job softmax "layer_mixers: [attention, swa, mlstm, mesa], attention_window: 16" \
  > "$dir/work/softmax.yaml"
job hawk "layer_mixers: [hawk, mesa, hawk, mesa], tie_embeddings: false" > "$dir/work/hawk.yaml"
job ssd "layer_mixers: [mamba2, mamba2, hawk, mlstm], ssm_expand: 2, ssm_head_dim: 32,
  ssm_state_dim: 32" > "$dir/work/ssd.yaml"
job fla "layer_mixers: [mesa, mesa, mesa, mesa], gamma_cap: 0, logit_softcap: 0" \
  ", reset_at_bos: false" > "$dir/work/fla.yaml"
val_windows "$dir/data" "$dir/tokens.txt"
printf '%s\n' '{"prompt": "The coordinator"}' '{"prompt": "A checkpoint is"}' > "$dir/prompts.jsonl"
for m in paper linear softmax hawk ssd fla; do
  "$bin/mesa-train" --config="$dir/work/$m.yaml" --workdir="$dir/work/$m" --threads=2 > /dev/null
  "$bin/mesa-export" --checkpoint="$dir/work/$m/checkpoints" --out="$dir/$m"
  "$bin/mesa-logits" --checkpoint="$dir/work/$m/checkpoints" --tokens="$dir/tokens.txt" \
    --out="$dir/$m.logits.safetensors"
  # Greedy continuations with fixed CG steps, as the export computes them.
  "$bin/mesa-generate" --checkpoint="$dir/work/$m/checkpoints" --prompts="$dir/prompts.jsonl" \
    --max_new_tokens=12 --temperature=0 --threads=2 --json > "$dir/$m.generate.jsonl"
done
rm -rf "$dir/work" "$dir/data"
du -sh "$dir"
