#!/usr/bin/env bash
# FLA's (flash-linear-attention's) DeltaNet and Gated DeltaNet chunk ops on one GPU, the public
# reference for our delta-rule kernels: bench/fla_deltanet_bench.py at B8 T2048 H16 D128 bf16,
# forward and forward+backward, then a small dump (inputs, FLA outputs and gradients, float64
# check) for a later cross-check. Needs FLA exported into .fla/fla (git-ignored; the commit and
# the export command are at the top of the benchmark) and PyTorch + Triton on the GPU machine; no
# network, no installs. Never fails the run: a missing FLA or PyTorch is a note and exit 0.
#   here: export .fla (see bench/fla_deltanet_bench.py)   there (carry .fla): bash scripts/gpu/gpu_check_fla.sh
# Environment: OUT (log and dump directory, default /tmp), FLA_BENCH_ARGS (extra benchmark flags,
# e.g. "--reps 100 --ops deltanet"), FLA_BENCH_TIMEOUT (seconds, default 480).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 0
out=${OUT:-/tmp}
mkdir -p "$out"
log="$out/fla_bench.log"
: > "$log"
export PYTHONPATH="$PWD/.fla${PYTHONPATH:+:$PYTHONPATH}"

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 ||
    echo "note: nvidia-smi failed"
  python3 - <<'PY' 2>&1
import sys
print("python", sys.version.split()[0])
for name in ("torch", "triton", "einops", "transformers", "safetensors", "tilelang", "flash_qla"):
    try:
        mod = __import__(name)
        print(name, getattr(mod, "__version__", "?"))
    except Exception as exc:  # noqa: BLE001
        print(name, "not importable:", type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
PY
} 2>&1 | tee -a "$log"

if [ ! -f .fla/fla/ops/delta_rule/chunk.py ]; then
  echo "note: .fla/fla is missing (export FLA there and carry .fla); nothing measured" | tee -a "$log"
  exit 0
fi
if ! python3 -c "import torch" >/dev/null 2>&1; then
  echo "note: PyTorch does not import; nothing measured" | tee -a "$log"
  exit 0
fi

echo "== FLA benchmark and dump" | tee -a "$log"
# shellcheck disable=SC2086  # FLA_BENCH_ARGS is a list of flags
timeout "${FLA_BENCH_TIMEOUT:-480}" python3 bench/fla_deltanet_bench.py --dump "$out/fla_dump" \
  ${FLA_BENCH_ARGS:-} 2>&1 | tee -a "$log"
rc=${PIPESTATUS[0]}
echo "fla_deltanet_bench rc=$rc" | tee -a "$log"
if grep -q "mode=import error" "$log"; then
  echo "note: fla could not be imported; see the error above" | tee -a "$log"
fi
echo "== summary" | tee -a "$log"
summary=$(grep -E '^FLA_(RESULT|CHECK)' "$log" | sed 's/^/  /')
echo "${summary:-  (no results)}" | tee -a "$log"
exit 0
