#!/usr/bin/env bash
# On the GPU machine: compares staged variants of the DeltaNet CUDA operator in one call
# (staged here by scripts/gpu/gpu_stage_deltanet.sh NAME into .device/dn/NAME/bin, shared libraries
# in .device/dn/lib). For each variant in VARIANTS (default "base new"): deltanet_cuda_test (skipped
# for variants in NOTEST), then the benchmark (reuse and recompute) ROUNDS times, interleaved across
# variants so that a drift of the card shows as spread, then ncu per-kernel times (NCU=1), then,
# for variants staged with MODEL=1, the CUDA backend's DeltaNet tests and the MesaNet-small-shaped
# model benchmark per mixer (MIXERS).
# Logs in $OUT/dn.tgz; a summary table last.
# Usage (carry [".device/dn", "scripts/gpu/gpu_check_deltanet_ab.sh"] or copy it into .device/dn):
#   VARIANTS="base new" NOTEST=base bash .device/dn/gpu_check_deltanet_ab.sh
set -uo pipefail
root=${DN_ROOT:-.device/dn}
out=${OUT:-/tmp/gpu_check}/dn
mkdir -p "$out"
# Staged variants may come packed (carry limit): DN_ROOT/dn.tgz holds NAME/bin and lib.
[ -f "$root/dn.tgz" ] && tar xzf "$root/dn.tgz" -C "$root"
source_libs() {
  export LD_LIBRARY_PATH="$(realpath "$root/lib"):/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  local m f
  for m in $(ldd "$root"/*/bin/* 2>/dev/null | awk '/not found/ {print $1}' | sort -u); do
    f=$(find / -xdev -name "$m" -print -quit 2>/dev/null)
    [ -n "$f" ] && export LD_LIBRARY_PATH="$(dirname "$f"):$LD_LIBRARY_PATH"
  done
}
source_libs
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader || true
status=0
summary=""
step() {  # log name, command...
  local name=$1
  shift
  timeout "${STEP_TIMEOUT:-200}" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "-- $name rc=$rc"
  [ $rc -ne 0 ] && { status=1; tail -n 30 "$out/$name.log"; }
  summary+=$'\n'"$name rc=$rc"
}
variants=${VARIANTS:-base new}
for v in $variants; do
  echo "== $v: $(cat "$root/$v/commit" | tr '\n' ' ')"
  case " ${NOTEST:-} " in *" $v "*) ;; *) step "${v}_test" "$root/$v/bin/deltanet_cuda_test" ;; esac
done
for round in $(seq 1 "${ROUNDS:-2}"); do
  for v in $variants; do
    step "${v}_bench_r$round" "$root/$v/bin/deltanet_cuda_bench" --reps "${BENCH_REPS:-50}"
    step "${v}_bench_recompute_r$round" env MESA_BENCH_RECOMPUTE=1 "$root/$v/bin/deltanet_cuda_bench" --reps "${BENCH_REPS:-50}"
  done
done
if [ "${NCU:-1}" = 1 ]; then
  ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
  for v in ${NCU_VARIANTS:-$variants}; do
    [ -n "$ncu_bin" ] || break
    step "${v}_ncu" "$ncu_bin" --clock-control none --metrics gpu__time_duration.sum,launch__registers_per_thread,launch__occupancy_limit_shared_mem,dram__bytes.sum \
      --launch-skip 0 --launch-count 64 "$root/$v/bin/deltanet_cuda_bench" --reps 1
    # Mean time per kernel name (ungated launches first, gated after: the bench runs gated second).
    awk '/Kernel[<(]/ && /Context/ {match($0, /[A-Za-z]+Kernel/); k=(n++ < 32 ? "plain " : "gated ") substr($0, RSTART, RLENGTH)}
         /gpu__time_duration.sum/ {t[k]+=$NF; c[k]++}
         /dram__bytes.sum/ {u=$(NF-1); x=$NF; if (u=="Gbyte") x*=1000; if (u=="Kbyte") x/=1000; if (u=="byte") x/=1e6; mb[k]+=x}
         /registers_per_thread/ {r[k]=$NF}
         /occupancy_limit_shared_mem/ {o[k]=$NF}
         END {for (k in t) printf "NCU %s %s: %.1f us mean over %d, %.0f MB dram, %s regs, smem-limit %s CTAs/SM\n", v, k, t[k]/c[k], c[k], mb[k]/c[k], r[k], o[k]}' v="$v" "$out/${v}_ncu.log" | sort | tee -a "$out/ncu_summary.txt"
  done
fi
for v in $variants; do
  [ -x "$root/$v/bin/cuda_backend_bench" ] || continue
  case " ${NOTEST:-} " in *" $v "*) ;; *) step "${v}_cuda_backend_deltanet" "$root/$v/bin/cuda_backend_test" --gtest_filter='*DeltaNet*' ;; esac
  for mixer in ${MIXERS:-mesa deltanet gated_deltanet}; do
    step "${v}_model_bench_$mixer" "$root/$v/bin/cuda_backend_bench" --mixer "$mixer" --steps 6 --no_gemm_table
  done
done
echo
echo "================ summary ================"
echo "$summary"
for v in $variants; do
  grep -H "^RESULT" "$out/${v}"_bench*.log | sed "s|$out/||"
  grep -h " vs f64:\| vs cpu:\|bf16 device\|PASSED\|FAILED" "$out/${v}_test.log" 2>/dev/null | head -30 | sed "s/^/$v: /"
  grep -h "PASSED\|FAILED" "$out/${v}_cuda_backend_deltanet.log" 2>/dev/null | sed "s/^/$v backend: /"
  grep -H "tokens_per_s" "$out/${v}"_model_bench_*.log 2>/dev/null | sed "s|$out/||"
done
cat "$out/ncu_summary.txt" 2>/dev/null
# One archive instead of many files (the device tool brings back a limited number of files).
tar czf "$out.tgz" -C "$out" . && rm -rf "$out"
exit $status
