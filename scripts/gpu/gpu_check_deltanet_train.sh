#!/usr/bin/env bash
# On the GPU machine: mesa-train on one GPU with examples/train_hybrid_deltanet_gpu.yaml (a
# MesaNet-small-sized [deltanet, mesa] hybrid) on synthetic GPT-2 tokens: 40 steps with an eval
# and a checkpoint every 20, then a second run to 50 steps that must resume from step 40.
# Staged by scripts/gpu/gpu_stage.sh (carry .device). Prints rc, losses, tokens/s, resume step.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/gpu_check}/deltanet_train
mkdir -p "$out"
if [ -f .device/gpu.tgz ] && [ ! -d .device/bin ]; then tar xzf .device/gpu.tgz -C .device; fi
export LD_LIBRARY_PATH="$(realpath .device/lib):/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
data=$(realpath "$out")/data
python3 scripts/synthetic_shards.py "$data" 1500000 100000
source scripts/gpu/gpu_jobs.sh
job() {  # steps, config out
  sed -e "s|data/slimpajama/train_\*.bin|$data/train_*.bin|" \
      -e "s|data/slimpajama/val_\*.bin|$data/val_*.bin|" -e "s|steps: 28610|steps: $1|" \
      -e "s|eval_interval: 1000|eval_interval: 20|" -e "s|eval_batches: 50|eval_batches: 2|" \
      -e "s|warmup_steps: 2000|warmup_steps: 10|" -e "s|log_interval: 10|log_interval: 5|" \
      -e "s|dir: checkpoints/deltanet-mesa-small|dir: $out/ckpt|" \
      -e "s|interval_steps: 1000|interval_steps: 20|" examples/train_hybrid_deltanet_gpu.yaml > "$2"
}
rm -rf "$out/ckpt"
status=0
for run in 1 2; do
  steps=$([ $run = 1 ] && echo 40 || echo 50)
  job "$steps" "$out/run$run.yaml"
  # A run by hand is a new run: the second asks to continue the first (docs/trainer.md, Resuming).
  if [ $run = 2 ]; then
    sed -i "s|^  interval_steps: 20$|  interval_steps: 20\n  resume: auto|" "$out/run$run.yaml"
  fi
  timeout 150 .device/bin/mesa-train --config "$out/run$run.yaml" --workdir "$out/w$run" \
    --device cuda --events_file "$out/run$run.jsonl" > "$out/run$run.log" 2>&1
  rc=$?
  [ $rc -ne 0 ] && status=1
  echo "== run $run (to step $steps): mesa-train rc=$rc"
  tail -2 "$out/run$run.log"
  python3 - "$out/run$run.jsonl" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
start = [e["start"] for e in ev if "start" in e]
if start: print("start:", {k: start[0].get(k) for k in ("device", "activations", "step", "parameters")})
loss = [(int(e["step"]["step"]), round(e["step"]["loss"], 3)) for e in ev if "step" in e and not e["step"]["skipped"]]
print("losses:", loss[:2], "...", loss[-2:])
print("evals:", [(int(e["eval"]["step"]), round(e["eval"]["metrics"]["val_loss"], 3)) for e in ev if "eval" in e])
print("checkpoints:", [int(e["checkpoint"]["step"]) for e in ev if "checkpoint" in e], "resumed:", [e["resumed"] for e in ev if "resumed" in e])
PY
  echo "tokens/s (after step 10): $(mean_tokens_per_second "$out/run$run.jsonl")"
done
exit $status
