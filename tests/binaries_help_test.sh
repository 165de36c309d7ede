#!/usr/bin/env bash
# Every binary a user runs explains itself: `--help` and `-h` print its usage and its own flags
# (one flag each binary defines is named below) on stdout and exit 0; an unknown flag or a value
# that does not parse is a usage error, exit 2, with a message on stderr.
set -uo pipefail
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# binary path | a flag of its own | a flag of its own that takes an integer (or "-")
check() {
  local bin=$1 own_flag=$2 int_flag=$3 name
  name=$(basename "$bin")
  for help in --help -h; do
    local out rc
    out=$("$bin" "$help" 2>/dev/null); rc=$?
    [ "$rc" -eq 0 ] || fail "$name $help exited $rc, want 0"
    grep -q -- "--$own_flag" <<<"$out" || fail "$name $help does not list --$own_flag"
    grep -q "^$name\|$name " <<<"$out" || fail "$name $help does not show its usage line"
  done
  "$bin" --no_such_flag_anywhere >/dev/null 2>"$TEST_TMPDIR/err"; rc=$?
  [ "$rc" -eq 2 ] || fail "$name --no_such_flag_anywhere exited $rc, want 2"
  grep -q "no_such_flag_anywhere" "$TEST_TMPDIR/err" || fail "$name: the error does not name the flag"
  if [ "$int_flag" != - ]; then
    "$bin" "--$int_flag=not-a-number" >/dev/null 2>&1; rc=$?
    [ "$rc" -eq 2 ] || fail "$name --$int_flag=not-a-number exited $rc, want 2"
  fi
}

check coordinator/mesa-coordinator db max_open_streams
check worker/mesa-worker coordinator cpu_slots
check model/main/mesa-train config events_fd
check model/main/mesa-generate max_new_tokens max_new_tokens
check model/main/mesa-export checkpoint -
check model/main/mesa-import hf_dir -
check model/main/mesa-data output_dir shard_tokens
check model/main/mesa-logits tokens -
check kernels/tools/mesa_op cg_tol cg_max
check serve/mesa-serve prefix_cache_mb slots

# mesactl (CLI11) keeps the same conventions.
out=$(cli/mesactl -h); rc=$?
[ "$rc" -eq 0 ] && grep -q -- "--server" <<<"$out" || fail "mesactl -h (rc $rc)"
cli/mesactl --no_such_flag_anywhere >/dev/null 2>&1; rc=$?
[ "$rc" -eq 2 ] || fail "mesactl --no_such_flag_anywhere exited $rc, want 2"

if [ "$failures" -ne 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "PASS"
