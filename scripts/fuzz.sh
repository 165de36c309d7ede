#!/usr/bin/env bash
# Fuzzes the parsers of untrusted input with libFuzzer (clang, -fsanitize=fuzzer,address,undefined)
# for a bounded time each, from the committed seed corpus in fuzz/corpus/<target>/:
#   job_file       job files (YAML → mesa.v1.JobSpec) and the job-spec validator
#   trainer_event  the worker's parser of mesa-train's event lines
#   safetensors    the safetensors reader (checkpoints, op-check inputs)
#   token_shard    the token-shard reader (training and validation data)
#   checkpoint_state  a checkpoint's state.json reader (resume)
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET (default 20)]. Prints "fuzz: N passed, N failed" last;
# a crash leaves its input in $FUZZ_OUT/<target>/ (default /tmp/mesa-fuzz) for a regression test.
# Reproducible: libFuzzer gets a fixed -seed (MESA_FUZZ_SEED, default 1; "random" lets libFuzzer
# pick one, which it prints), and runs with address-space randomisation off (setarch -R, where
# the kernel allows it): hash tables seeded from addresses (Abseil, protobuf) otherwise feed
# different comparison values to libFuzzer and the same seed mutates differently. So a run tries
# the same inputs in the same order every time; the time limit only decides how many.
# MESA_FUZZ_RUNS=N fixes that number too (-runs=N), making the whole run identical.
# MESA_FUZZ_DRY_RUN=1 prints the fuzzer command lines and exits without building or running.
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
out=${FUZZ_OUT:-/tmp/mesa-fuzz}
seed=${MESA_FUZZ_SEED:-1}
runs=${MESA_FUZZ_RUNS:-}
[ "$seed" = random ] && seed=0  # libFuzzer: -seed=0 draws a seed (and prints it)
if ! [[ "$seed" =~ ^[0-9]+$ ]] || [ "$seed" -gt 4294967295 ]; then
  echo "fuzz: MESA_FUZZ_SEED must be an integer in [0, 4294967295] or \"random\", got \"$seed\""
  echo "fuzz: 0 passed, 1 failed"; exit 2
fi
if [ -n "$runs" ] && ! [[ "$runs" =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz: MESA_FUZZ_RUNS must be a positive integer, got \"$runs\""
  echo "fuzz: 0 passed, 1 failed"; exit 2
fi
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz: SECONDS_PER_TARGET must be a positive integer, got \"$seconds\""
  echo "fuzz: 0 passed, 1 failed"; exit 2
fi
targets=(job_file trainer_event safetensors token_shard checkpoint_state)
# The libFuzzer options of every run: fixed seed, bounded time, memory and per-input time.
fuzz_options=(-seed="$seed" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048
              -print_final_stats=1)
[ -n "$runs" ] && fuzz_options+=(-runs="$runs")
no_aslr=()
if setarch "$(uname -m)" -R true 2>/dev/null; then
  no_aslr=(setarch "$(uname -m)" -R)
else
  echo "fuzz: cannot turn address-space randomisation off (setarch -R): runs with one seed may differ"
fi
if [ "${MESA_FUZZ_DRY_RUN:-0}" = 1 ]; then
  for target in "${targets[@]}"; do
    echo "fuzz: $target: ${no_aslr[*]}${no_aslr[*]:+ }$out/${target}_fuzzer ${fuzz_options[*]} -artifact_prefix=$out/$target/ $out/$target.corpus"
  done
  exit 0
fi
mkdir -p "$out"
# The generated protobuf sources come from Bazel; everything else is compiled here with clang.
bazel build //proto:job_cc_proto //proto:trainer_cc_proto >"$out/bazel.log" 2>&1 ||
  { tail -20 "$out/bazel.log"; echo "fuzz: 0 passed, 1 failed"; exit 1; }
gen=bazel-bin/proto
absl_libs=$(pkg-config --libs absl_status absl_statusor absl_strings absl_str_format \
  absl_synchronization absl_cord absl_time)
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I. -I"$gen" -Wno-deprecated-declarations)
libs=($(pkg-config --libs protobuf yaml-cpp re2 libcrypto libutf8proc) $absl_libs -lz -lpthread)
# Each fuzzer links the libraries it exercises; their sources (and the generated protobuf sources
# of the .proto files they use) come from Bazel's dependency graph, so the list cannot drift from
# the BUILD files when a library gains a dependency.
declare -A libraries=(
  [job_file]="//proto:spec_yaml //spec:validate_job_spec"
  [trainer_event]="//proto:trainer_events"
  [safetensors]="//formats:safetensors"
  [token_shard]="//model/data:token_shard"
  [checkpoint_state]="//model/checkpoint:checkpoint"
)
# Prints the .cc sources (ours, not external) under the given labels, generated ones from $gen.
library_sources() {
  local expr
  expr=$(printf 'deps(%s) + ' "$@"); expr=${expr% + }
  bazel cquery "kind(\"source file\", $expr)" --output=label 2>>"$out/bazel.log" |
    grep -v '^@' | sed 's/ (null)$//' | while read -r label; do
      local package=${label%%:*} file=${label#*:}
      package=${package#//}
      case $file in
        *.cc) echo "$package/$file" ;;
        *.proto) echo "$gen/${file%.proto}.pb.cc" ;;
      esac
    done
}
declare -A sources=()
for target in "${targets[@]}"; do
  # shellcheck disable=SC2086
  list=$(library_sources ${libraries[$target]}) && [ -n "$list" ] ||
    { tail -20 "$out/bazel.log"; echo "fuzz: $target: cannot list the sources of ${libraries[$target]}"
      echo "fuzz: 0 passed, 1 failed"; exit 1; }
  sources[$target]="fuzz/${target}_fuzzer.cc $(echo $list)"
done
passed=0 failed=0
for target in "${targets[@]}"; do
  bin="$out/${target}_fuzzer"
  # shellcheck disable=SC2086
  if ! clang++ "${flags[@]}" ${sources[$target]} "${libs[@]}" -o "$bin" >"$out/$target.build.log" 2>&1; then
    echo "fuzz: $target: build failed"; tail -20 "$out/$target.build.log"; failed=$((failed + 1)); continue
  fi
  corpus="$out/$target.corpus"  # a working copy: the committed seeds stay as they are
  rm -rf "$corpus" && cp -r "fuzz/corpus/$target" "$corpus"
  mkdir -p "$out/$target"
  if "${no_aslr[@]}" "$bin" "${fuzz_options[@]}" -artifact_prefix="$out/$target/" "$corpus" >"$out/$target.log" 2>&1; then
    echo "fuzz: $target: ok ($(grep -o 'stat::number_of_executed_units: *[0-9]*' "$out/$target.log" | grep -o '[0-9]*$') runs in at most ${seconds}s, $(grep -o 'INFO: Seed: [0-9]*' "$out/$target.log" | head -1 | grep -o '[0-9]*$' | sed 's/^/seed /'))"
    passed=$((passed + 1))
  else
    echo "fuzz: $target: FAILED"; grep -E 'ERROR|SUMMARY|artifact|INFO: Seed' "$out/$target.log" | head -10
    echo "fuzz: $target: replay the run with MESA_FUZZ_SEED=$(grep -o 'INFO: Seed: [0-9]*' "$out/$target.log" | head -1 | grep -o '[0-9]*$') scripts/fuzz.sh $seconds, or the input with $bin $out/$target/<crash file>"
    failed=$((failed + 1))
  fi
done
echo "fuzz: ${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
