#!/usr/bin/env bash
# On the GPU machine: every GPU test binary staged by scripts/gpu/gpu_stage.sh (each `*_test` in
# .device/bin, one after the other, bounded), the op-check tool against its float64 references
# (scripts/gpu/gpu_check_opcheck.sh), then mesa-train's tokens/s at the MesaNet-small shape as a
# regression guard (scripts/gpu/gpu_quick.sh's training part). Prints one table at the end; full
# logs in $OUT. Exit status 1 when any test fails.
#   here:  bash scripts/gpu/gpu_stage.sh    there (carry .device):  bash scripts/gpu/gpu_tests.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/gpu_tests}
mkdir -p "$out"
if [ -f .device/gpu.tgz ] && [ ! -d .device/bin ]; then tar xzf .device/gpu.tgz -C .device; fi
[ -d .device/bin ] || { echo "no staged binaries: run scripts/gpu/gpu_stage.sh and carry .device" >&2; exit 2; }
source scripts/gpu/gpu_jobs.sh
use_device_libs .device/bin
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "commit $(tr '\n' ' ' < .device/bin/commit); $(date -u)"
status=0
table=""
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for t in .device/bin/*_test; do
  name=$(basename "$t")
  start=$(date +%s)
  args=()
  if [ "$name" = nccl_communicator_gpu_test ]; then  # two ranks under mpirun
    if [ "$ngpu" -lt 2 ]; then
      table+=$(printf '\n%-28s skipped: needs 2 GPUs (%s here); scripts/gpu/gpu_comm_check.sh' "$name" "$ngpu")
      continue
    fi
    export MPIRUN=$(command -v mpirun)
    args=(.device/bin/comm_check_cuda --device=cuda)
  fi
  timeout "${TEST_TIMEOUT_S:-240}" "$t" "${args[@]}" > "$out/$name.log" 2>&1
  rc=$?
  [ $rc -ne 0 ] && status=1
  # GoogleTest's summary, or the plain "PASSED: N failures" of the op tests without GoogleTest.
  passed=$(grep -m1 -E '^\[  PASSED  \]|^PASSED: ' "$out/$name.log" | sed 's/^\[  PASSED  \] //')
  failed=$(grep -E '^\[  FAILED  \] [A-Za-z]' "$out/$name.log" | sed 's/^\[  FAILED  \] //' | tr '\n' ' ')
  skipped=$(grep -m1 -E '^\[  SKIPPED \] [0-9]' "$out/$name.log" | sed 's/^\[  SKIPPED \] //')
  table+=$(printf '\n%-28s rc=%-3s %4ss  %s%s%s' "$name" "$rc" "$(( $(date +%s) - start ))" \
    "${passed:-}" "${skipped:+; skipped $skipped}" "${failed:+; FAILED: $failed}")
done
echo "== op-check tool (CUDA and CPU against the float64 reference)"
OUT="$out/opcheck" bash scripts/gpu/gpu_check_opcheck.sh .device > "$out/opcheck.log" 2>&1
opcheck_rc=$?
[ $opcheck_rc -ne 0 ] && status=1
echo "== mesa-train, one GPU, MesaNet-small (synthetic GPT-2 tokens)"
data=$(realpath "$out")/data
python3 scripts/synthetic_shards.py "$data" 1500000 100000 > /dev/null
small_job "$data" "$out/ckpt" 8 0 "${TRAIN_STEPS:-40}" "$out/train.yaml"
timeout 150 .device/bin/mesa-train --config "$out/train.yaml" --workdir "$out/train" --device cuda \
  --events_file "$out/train.jsonl" > "$out/train.log" 2>&1
train_rc=$?
[ $train_rc -ne 0 ] && status=1
tokens_per_s=$(mean_tokens_per_second "$out/train.jsonl")
echo
echo "================ GPU tests summary"
echo "$table"
echo "op-check: rc=$opcheck_rc; $(grep -m1 'op-check summary' "$out/opcheck.log")"
grep -E "FAIL" "$out/opcheck.log" | head -10
echo "mesa-train: rc=$train_rc; ${tokens_per_s:-no step events} tokens/s (mean of step events after step 10)"
exit $status
