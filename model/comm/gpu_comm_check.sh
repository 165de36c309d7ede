#!/usr/bin/env bash
# NCCL data-parallel checks for a machine with 2+ GPUs (not run in CI).
#
#   bash model/comm/gpu_comm_check.sh stage   # here (no GPU): bazel build -c opt, copy the
#                                             # binaries and the Debian-only libraries to .device/comm
#   bash model/comm/gpu_comm_check.sh run     # on the GPU machine, from the repository root,
#                                             # with .device carried (no Bazel needed there)
#
# `run` does, in order:
#   1. nccl_communicator_gpu_test: mpirun -np 2 comm_check_cuda --device=cuda: every collective on
#      device buffers against a host reference on fresh random data, a rank that exits early, a
#      rank that hangs (the watchdog aborts the communicator; bounded);
#   2. nccl_allreduce_bench under mpirun -np 2: our all-reduce bus bandwidth, queued (like
#      nccl-tests) and blocking (as the trainer calls it), 1 MiB .. 1 GiB;
#   3. NCCL's own all_reduce_perf (nccl-tests) on the same machine when it is on PATH or
#      $NCCL_TESTS_DIR, for the comparison docs/PERFORMANCE.md asks for.
# Results go to $OUT (default /tmp/gpu_comm_check); the summary is printed at the end.
set -uo pipefail
cd "$(dirname "$0")/../.."
stage=.device/comm

if [ "${1:-}" = "stage" ]; then
  set -e
  targets=(//model/comm:comm_check_cuda //model/comm:nccl_allreduce_bench
           //model/comm:nccl_communicator_gpu_test)
  bazel build -c opt "${targets[@]}"
  rm -rf "$stage"
  mkdir -p "$stage/bin" "$stage/lib"
  for t in "${targets[@]}"; do
    name=${t##*:}
    cp -fL "bazel-bin/model/comm/${name}" "$stage/bin/"
    chmod u+w "$stage/bin/${name}"
  done
  for bin in "$stage"/bin/*; do
    ldd "$bin" | awk '/=>/ {print $3}' | grep -E 'libabsl|libgtest|libgmock' || true
  done | sort -u | while read -r lib; do cp -fL "$lib" "$stage/lib/"; done
  du -sh "$stage"
  exit 0
fi

[ "${1:-}" = "run" ] || { echo "usage: $0 stage|run" >&2; exit 2; }
out=${OUT:-/tmp/gpu_comm_check}
mkdir -p "$out"
export LD_LIBRARY_PATH="$(realpath "$stage/lib"):/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader || true
nvidia-smi topo -m 2>/dev/null | head -5 || true
[ "$ngpu" -ge 2 ] || echo "WARNING: $ngpu GPU(s) visible; these checks need 2"
mpi=(mpirun -np 2 --oversubscribe --allow-run-as-root --bind-to none
     -x LD_LIBRARY_PATH -x NCCL_DEBUG -x MESA_COLLECTIVE_TIMEOUT_S)
status=0

echo "== nccl_communicator_gpu_test"
MPIRUN=$(command -v mpirun) "$stage/bin/nccl_communicator_gpu_test" \
  "$stage/bin/comm_check_cuda" --device=cuda 2>&1 | tee "$out/test.log"
test_rc=${PIPESTATUS[0]}
[ "$test_rc" -ne 0 ] && status=1

echo "== nccl_allreduce_bench (2 ranks)"
"${mpi[@]}" "$stage/bin/nccl_allreduce_bench" --iters "${BENCH_ITERS:-20}" 2>&1 | tee "$out/bench.log"
bench_rc=${PIPESTATUS[0]}
[ "$bench_rc" -ne 0 ] && status=1

perf=$(command -v all_reduce_perf || true)
[ -z "$perf" ] && [ -n "${NCCL_TESTS_DIR:-}" ] && perf="$NCCL_TESTS_DIR/all_reduce_perf"
if [ -n "$perf" ] && [ -x "$perf" ]; then
  echo "== nccl-tests all_reduce_perf (2 GPUs, one process)"
  "$perf" -b 1M -e 1G -f 2 -g 2 -n "${BENCH_ITERS:-20}" 2>&1 | tee "$out/nccl_tests.log"
else
  echo "== nccl-tests all_reduce_perf not found (set NCCL_TESTS_DIR); skipped" | tee "$out/nccl_tests.log"
fi

echo
echo "================ summary ================"
echo "gpu test: rc=$test_rc  $(grep -E '^\[  (PASSED|FAILED)' "$out/test.log" | tr '\n' ' ')"
printf '%-12s %-10s %-12s %-18s\n' bytes time_us busbw_GBs blocking_busbw_GBs
grep '^RESULT allreduce' "$out/bench.log" | sed -E 's/.*bytes=([0-9]+).*time_us=([0-9.]+).*[^_]busbw_GBs=([0-9.]+).*blocking_busbw_GBs=([0-9.]+).*/\1 \2 \3 \4/' |
  awk '{printf "%-12s %-10s %-12s %-18s\n", $1, $2, $3, $4}'
echo "bench: rc=$bench_rc"
grep -E '^ +[0-9]+ +[0-9]+ +float' "$out/nccl_tests.log" | awk '{print "nccl-tests", $1, "bytes busbw(out-of-place)", $8, "busbw(in-place)", $12}' || true
exit $status
