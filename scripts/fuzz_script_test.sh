#!/usr/bin/env bash
# scripts/fuzz.sh passes libFuzzer a fixed seed (MESA_FUZZ_SEED, default 1) and turns address-space
# randomisation off so that CI runs are reproducible, MESA_FUZZ_RUNS fixes the number of inputs
# too, and bad values are refused.
# Checked through its dry run (the command lines it would run; nothing is built).
set -uo pipefail
script="$(dirname "$0")/fuzz.sh"
fail=0
check() {  # check NAME EXPECTED_RC PATTERN_THAT_MUST_MATCH_EVERY_TARGET_LINE [env...] -- args
  local name=$1 want_rc=$2 pattern=$3
  shift 3
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  local out rc
  out=$(env MESA_FUZZ_DRY_RUN=1 FUZZ_OUT=/nonexistent/fuzz "${envs[@]}" bash "$script" "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$want_rc" ]; then
    echo "FAIL $name: exit $rc, want $want_rc"; echo "$out"; fail=1; return
  fi
  if [ "$want_rc" -eq 0 ]; then
    local lines
    lines=$(echo "$out" | grep -c '^fuzz: [a-z_]*: ')
    if [ "$lines" -ne 5 ] || [ "$(echo "$out" | grep -c -- "$pattern")" -ne 5 ]; then
      echo "FAIL $name: want 5 target lines matching '$pattern'"; echo "$out"; fail=1; return
    fi
  elif ! echo "$out" | grep -q -- "$pattern"; then
    echo "FAIL $name: want '$pattern'"; echo "$out"; fail=1; return
  fi
  echo "ok $name"
}
check default-seed 0 ' -seed=1 .*-max_total_time=20 ' --
check seed-from-env 0 ' -seed=42 .*-max_total_time=7 ' MESA_FUZZ_SEED=42 -- 7
check random-seed 0 ' -seed=0 ' MESA_FUZZ_SEED=random --
check fixed-runs 0 ' -seed=1 .* -runs=5000 ' MESA_FUZZ_RUNS=5000 --
check no-runs-by-default 0 '_fuzzer -seed=1 -max_total_time=20 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=' --
# Address-space randomisation off where the kernel allows it (the same seed then mutates the same).
if setarch "$(uname -m)" -R true 2>/dev/null; then
  check aslr-off 0 "^fuzz: [a-z_]*: setarch $(uname -m) -R [^ ]*_fuzzer " --
else
  echo "note: setarch -R is not allowed here; not checked"
fi
check bad-seed 2 'MESA_FUZZ_SEED must be an integer' MESA_FUZZ_SEED=abc --
check seed-too-large 2 'MESA_FUZZ_SEED must be an integer' MESA_FUZZ_SEED=4294967296 --
check bad-runs 2 'MESA_FUZZ_RUNS must be a positive integer' MESA_FUZZ_RUNS=0 --
check bad-seconds 2 'SECONDS_PER_TARGET must be a positive integer' -- x
exit $fail
