#!/usr/bin/env bash
# Runs every test that needs no GPU: installs system packages, then `bazel test //...`.
# Prints a final "N passed, N failed" line. Extra arguments go to `bazel test`.
set -uo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh || { echo "setup failed"; echo "0 passed, 1 failed"; exit 1; }

log=$(mktemp)
trap 'rm -f "$log"' EXIT
bazel test //... --keep_going "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}

passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)' "$log")
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi  # a build error fails the run too
echo "${passed} passed, ${failed} failed"
exit "$rc"
