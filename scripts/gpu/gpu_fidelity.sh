#!/usr/bin/env bash
# Issue 17's fidelity run on one GPU (docs/PERFORMANCE.md, "Fidelity"): the MAD grid (6 tasks x 5
# mixers, 2 layers), MQAR accuracy vs number of pairs (Mesa vs GLA) and the CG epsilon sweep of a
# small Mesa model trained on the Brown corpus, as concurrent mesa-train processes within one
# wall-clock budget (scripts/gpu/fidelity.py says how the step count is chosen).
# Here:  GPU_TARGETS="//model/main:mesa-train //model/main:mesa-data" bash scripts/gpu/gpu_stage.sh
#        then copy .device/gpu.tgz, this script, fidelity.py and data/brown/shards/*.bin to
#        .device/fidelity/ (brown/ beneath it) of the tree the device call carries.
# Device: bash .device/fidelity/gpu_fidelity.sh   (FIDELITY_BUDGET seconds, default 390;
#   FIDELITY_STEPS fixes the steps per synthetic run instead of calibrating: the 2026-11-26 run's
#   calibration chose 800 and the grid then took 110 s of the 288 s it had, so ~2,000 fit)
# CPU trial here: FIDELITY_TINY=1 bash scripts/gpu/gpu_fidelity.sh DIR_WITH_gpu.tgz
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
stage=${1:-$here}
out=${OUT:-/tmp/fidelity_out}
work=/tmp/fidelity_work
rm -rf /tmp/x "$work" && mkdir -p /tmp/x "$out"
tar xzf "$stage/gpu.tgz" -C /tmp/x
if [ -f scripts/gpu/gpu_jobs.sh ]; then source scripts/gpu/gpu_jobs.sh; use_device_libs /tmp/x/bin; fi
brown=$stage/brown
[ -f "$brown/train_000000.bin" ] || brown=""
if [ -n "${FIDELITY_TINY:-}" ]; then
  # A few steps of every run on the CPU: checks the configs and the summary, not the numbers.
  python3 "$here/fidelity.py" --bin /tmp/x/bin --work "$work" --out "$out" --device cpu \
    --budget 1000 --parallel 2 --steps 4 --examples 64 --batch 8 ${brown:+--brown "$brown"} \
    --brown_steps 4 --brown_width 64 --brown_layers 1 --brown_seq 64 --brown_batch 2 \
    --brown_eval_batches 2 --brown_train_frac 10
else
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  python3 "$here/fidelity.py" --bin /tmp/x/bin --work "$work" --out "$out" --device cuda \
    --budget "${FIDELITY_BUDGET:-390}" ${FIDELITY_STEPS:+--steps "$FIDELITY_STEPS"} \
    ${brown:+--brown "$brown"}
fi
# Every run's configs, events and stderr (small) come back as one archive.
tar czf "$out/fidelity_logs.tgz" -C "$work" --exclude=ckpt .
