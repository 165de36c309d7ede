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
