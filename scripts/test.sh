#!/usr/bin/env bash
# Runs every test that needs no GPU: installs system packages, then `bazel test //... --config=cuda`
# (the CUDA build, so every kernel is compiled; docs/build.md, "Build configurations").
# then checks the C++ formatting (scripts/format_check.sh, one test), then fuzzes the parsers of
# untrusted input for a bounded time (scripts/fuzz.sh; MESA_SKIP_FUZZ=1 skips).
# Prints a final "N passed, N failed" line (each fuzz target counts as one). Extra arguments go to
# `bazel test`.
set -uo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh || { echo "setup failed"; echo "0 passed, 1 failed"; exit 1; }

log=$(mktemp)
trap 'rm -f "$log"' EXIT
bazel test //... --config=cuda --keep_going "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}

passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)' "$log")
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi  # a build error fails the run too

if bash scripts/format_check.sh; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  [ "$rc" -eq 0 ] && rc=1
fi

if [ "${MESA_SKIP_FUZZ:-0}" != 1 ]; then
  bash scripts/fuzz.sh "${MESA_FUZZ_SECONDS:-20}" 2>&1 | tee "$log"
  fuzz_rc=${PIPESTATUS[0]}
  fuzz_line=$(grep -E '^fuzz: [0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
  fuzz_passed=$(echo "$fuzz_line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+')
  fuzz_failed=$(echo "$fuzz_line" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+')
  passed=$((passed + ${fuzz_passed:-0}))
  failed=$((failed + ${fuzz_failed:-1}))
  if [ "$fuzz_rc" -ne 0 ] && [ "$rc" -eq 0 ]; then rc=$fuzz_rc; fi
fi
echo "${passed} passed, ${failed} failed"
exit "$rc"
