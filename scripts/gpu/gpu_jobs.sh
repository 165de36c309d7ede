# Sourced by the GPU scripts (scripts/gpu/*.sh), from the repository root: the library path of the
# staged binaries, and job files for throughput runs made from examples/train_small_gpu.yaml
# (MesaNet-small) on synthetic shards.

# small_job DATA_DIR CKPT_DIR GLOBAL_BATCH ZERO_STAGE STEPS OUT_YAML
small_job() {
  sed -e "s|data/slimpajama/train_\*.bin|$1/train_*.bin|" \
      -e "s|data/slimpajama/val_\*.bin|$1/val_*.bin|" \
      -e "s|batch_size: 8|batch_size: $3|" -e "s|steps: 28610.*|steps: $5|" \
      -e "s|log_interval: 10|log_interval: 5|" -e "s|eval_interval: 1000|eval_interval: 0|" \
      -e "s|warmup_steps: 2000|warmup_steps: 10\n  zero_stage: $4|" \
      -e "s|dir: checkpoints/mesanet-small|dir: $2|" \
      -e "s|interval_steps: 1000|interval_steps: 0|" examples/train_small_gpu.yaml > "$6"
}

# mean_tokens_per_second EVENTS_JSONL: the mean tokens/s of mesa-train's step events after step 10
# (the first steps include cuBLASLt planning and allocation); "nan" without such events.
mean_tokens_per_second() {
  python3 -c '
import json, sys
steps = [e["step"] for e in map(json.loads, open(sys.argv[1])) if "step" in e]
v = [s["tokens_per_second"] for s in steps if int(s["step"]) > 10 and not s["skipped"]]
print("%.0f" % (sum(v) / len(v)) if v else "nan")' "$1" 2>/dev/null || echo nan
}

# mixer_tokens_per_second MODEL EXAMPLE_YAML OUT_DIR DATA_DIR [BIN_DIR]: trains EXAMPLE_YAML (a
# MesaNet-small-shaped GPU example; MODEL "attention" makes every layer softmax attention) for 30
# steps on DATA_DIR's shards with mesa-train and prints "MODEL: rc params tokens/s last step";
# returns mesa-train's status.
mixer_tokens_per_second() {
  local model=$1 src=$2 out=$3 data=$4 bin=${5:-.device/bin} rc
  sed -e "s|data/slimpajama/train_\*.bin|$data/train_*.bin|" \
      -e "s|data/slimpajama/val_\*.bin|$data/val_*.bin|" -e "s|steps: 28610|steps: 30|" \
      -e "s|eval_interval: 1000|eval_interval: 1000000|" -e "s|log_interval: 10|log_interval: 5|" \
      -e "s|warmup_steps: 2000|warmup_steps: 10|" -e "s|dir: checkpoints/.*|dir: $out/ckpt_$model|" \
      -e "s|interval_steps: 1000|interval_steps: 1000000|" "$src" > "$out/$model.yaml"
  if [ "$model" = attention ]; then  # every layer softmax attention
    sed -i -e 's|^  layer_mixers: .*|  layer_mixers: [attention]|' -e '/^  cg_steps:/d' \
      -e '/^  attention_window:/d' "$out/$model.yaml"
  fi
  timeout 200 "$bin/mesa-train" --config "$out/$model.yaml" --workdir "$out/w_$model" \
    --device cuda --events_file "$out/$model.jsonl" > "$out/$model.log" 2>&1
  rc=$?
  echo "$model: rc=$rc params=$(grep -o '"parameters":[0-9]*' "$out/$model.jsonl" | head -1 | cut -d: -f2) tokens/s=$(mean_tokens_per_second "$out/$model.jsonl") last: $(grep -E 'step 30/' "$out/$model.log" | tail -1)"
  [ $rc -ne 0 ] && tail -5 "$out/$model.log"
  return $rc
}

# use_device_libs BIN_DIR: LD_LIBRARY_PATH for the staged binaries (their lib/ beside BIN_DIR, the
# CUDA toolkit, and wherever this image keeps CUDA libraries the binaries name but the loader
# does not find, e.g. pip's nvidia-* wheels).
use_device_libs() {
  local bin=$1 m f
  export LD_LIBRARY_PATH="$(realpath "$(dirname "$bin")/lib"):/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  for m in $(ldd "$bin"/* 2>/dev/null | awk '/not found/ {print $1}' | sort -u); do
    f=$(find / -xdev -name "$m" -print -quit 2>/dev/null)
    [ -n "$f" ] && export LD_LIBRARY_PATH="$(dirname "$f"):$LD_LIBRARY_PATH"
  done
}
