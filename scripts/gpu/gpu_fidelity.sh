#!/usr/bin/env bash
# The fidelity run on one GPU (docs/PERFORMANCE.md, "Fidelity"): the MAD grid (6 tasks x 5
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
# MesaNet-small's epsilon sweep alone: FIDELITY_SMALL=1 (below; with FIDELITY_TINY=1 on the CPU)
# MAD's protocol grid instead: FIDELITY_MAD_PROTOCOL=1, FIDELITY_MAD_ARGS="--mad_tasks ... " for a
#   subset (fidelity.py prints the estimate first and refuses one over FIDELITY_BUDGET); copy
#   mad_grid.py beside fidelity.py. With FIDELITY_TINY=1: every setting, 2 steps, on the CPU.
# Scratch (the unpacked binaries, the runs' work directories) lives in fresh mktemp directories,
# removed on exit: a shared machine's other users of /tmp keep theirs. Results go to $OUT (else a
# fresh directory, printed), and the runs' logs are archived there even when a run fails.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
stage=${1:-$here}
[ -f "$stage/gpu.tgz" ] || { echo "gpu_fidelity.sh: no gpu.tgz in $stage" >&2; exit 2; }
out=${OUT:-$(mktemp -d -t fidelity_out.XXXXXX)}
mkdir -p "$out"
unpacked=$(mktemp -d -t fidelity_bin.XXXXXX)
work=$(mktemp -d -t fidelity_work.XXXXXX)
finish() {
  # Every run's configs, events and stderr (small) come back as one archive.
  tar czf "$out/fidelity_logs.tgz" -C "$work" --exclude=ckpt . || true
  rm -rf "$unpacked" "$work"
}
trap finish EXIT
echo "gpu_fidelity.sh: results in $out"
tar xzf "$stage/gpu.tgz" -C "$unpacked"
bin=$unpacked/bin
if [ -f scripts/gpu/gpu_jobs.sh ]; then source scripts/gpu/gpu_jobs.sh; use_device_libs "$bin"; fi
brown=$stage/brown
[ -f "$brown/train_000000.bin" ] || brown=""
# FIDELITY_SMALL=1: the epsilon sweep alone on MesaNet-small's shape (examples/train_small_gpu.yaml
# but byte-level: vocabulary 257), trained FIDELITY_STEPS (default 2000) steps of 8 x 2048 or until
# FIDELITY_TRAIN_SECONDS (default 150) after the start, then eval.cg_sweep on the validation set.
small=(--only_brown --brown_small --brown_layers 14 --brown_width 768 --brown_head_dim 128
       --brown_seq 2048 --brown_batch 8 --brown_lr 1e-3 --brown_warmup 200
       --brown_steps "${FIDELITY_STEPS:-2000}" --brown_eval_batches 16 --brown_train_frac 1
       --budget "${FIDELITY_TRAIN_SECONDS:-150}")
if [ -n "${FIDELITY_MAD_PROTOCOL:-}" ]; then
  read -ra mad <<< "${FIDELITY_MAD_ARGS:-}"
  if [ -n "${FIDELITY_TINY:-}" ]; then
    # Every task, setting and mixer, one lr x wd, 2 steps on the CPU: checks every config.
    python3 "$here/fidelity.py" --bin "$bin" --work "$work" --out "$out" --device cpu \
      --mad_protocol --budget 100000 --parallel 2 --steps 2 --examples 64 --batch 8 \
      --mad_lrs 3e-3 --mad_wds 0.1 "${mad[@]}"
  else
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    python3 "$here/fidelity.py" --bin "$bin" --work "$work" --out "$out" --device cuda \
      --mad_protocol --budget "${FIDELITY_BUDGET:-540}" --steps "${FIDELITY_STEPS:-800}" \
      "${mad[@]}"
  fi
elif [ -n "${FIDELITY_TINY:-}" ] && [ -n "${FIDELITY_SMALL:-}" ]; then
  # The same options with a tiny shape on the CPU: checks the configs and the summary.
  python3 "$here/fidelity.py" --bin "$bin" --work "$work" --out "$out" --device cpu \
    --brown "$brown" "${small[@]}" --brown_layers 2 --brown_width 64 --brown_head_dim 32 \
    --brown_seq 64 --brown_batch 2 --brown_steps 4 --brown_warmup 1 --brown_eval_batches 2 \
    --budget 1000
elif [ -n "${FIDELITY_TINY:-}" ]; then
  # A few steps of every run on the CPU: checks the configs and the summary, not the numbers.
  python3 "$here/fidelity.py" --bin "$bin" --work "$work" --out "$out" --device cpu \
    --budget 1000 --parallel 2 --steps 4 --examples 64 --batch 8 ${brown:+--brown "$brown"} \
    --brown_steps 4 --brown_width 64 --brown_layers 1 --brown_seq 64 --brown_batch 2 \
    --brown_eval_batches 2 --brown_train_frac 10
elif [ -n "${FIDELITY_SMALL:-}" ]; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  python3 "$here/fidelity.py" --bin "$bin" --work "$work" --out "$out" --device cuda \
    --brown "$brown" "${small[@]}"
else
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  python3 "$here/fidelity.py" --bin "$bin" --work "$work" --out "$out" --device cuda \
    --budget "${FIDELITY_BUDGET:-390}" ${FIDELITY_STEPS:+--steps "$FIDELITY_STEPS"} \
    ${brown:+--brown "$brown"}
fi
