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
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
out=${FUZZ_OUT:-/tmp/mesa-fuzz}
mkdir -p "$out"
# The generated protobuf sources come from Bazel; everything else is compiled here with clang.
bazel build //proto:job_cc_proto //proto:trainer_cc_proto >"$out/bazel.log" 2>&1 ||
  { tail -20 "$out/bazel.log"; echo "fuzz: 0 passed, 1 failed"; exit 1; }
gen=bazel-bin/proto
absl_libs=$(pkg-config --libs absl_status absl_statusor absl_strings absl_str_format \
  absl_synchronization absl_cord absl_time)
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I. -I"$gen" -Wno-deprecated-declarations)
libs=($(pkg-config --libs protobuf yaml-cpp) $absl_libs -lz -lpthread)
declare -A sources=(
  [job_file]="fuzz/job_file_fuzzer.cc proto/spec_yaml.cc spec/validate_job_spec.cc base/file_util.cc base/utf8.cc $gen/mesa/v1/job.pb.cc"
  [trainer_event]="fuzz/trainer_event_fuzzer.cc proto/trainer_events.cc $gen/mesa/v1/trainer.pb.cc $gen/mesa/v1/job.pb.cc"
  [safetensors]="fuzz/safetensors_fuzzer.cc kernels/safetensors.cc base/file_util.cc"
  [token_shard]="fuzz/token_shard_fuzzer.cc model/data/token_shard.cc base/file_util.cc"
  [checkpoint_state]="fuzz/checkpoint_state_fuzzer.cc model/checkpoint/checkpoint.cc model/net/param_layout.cc model/config/job_config.cc spec/validate_job_spec.cc kernels/safetensors.cc base/file_util.cc base/utf8.cc $gen/mesa/v1/job.pb.cc"
)
passed=0 failed=0
for target in job_file trainer_event safetensors token_shard checkpoint_state; do
  bin="$out/${target}_fuzzer"
  # shellcheck disable=SC2086
  if ! clang++ "${flags[@]}" ${sources[$target]} "${libs[@]}" -o "$bin" >"$out/$target.build.log" 2>&1; then
    echo "fuzz: $target: build failed"; tail -20 "$out/$target.build.log"; failed=$((failed + 1)); continue
  fi
  corpus="$out/$target.corpus"  # a working copy: the committed seeds stay as they are
  rm -rf "$corpus" && cp -r "fuzz/corpus/$target" "$corpus"
  mkdir -p "$out/$target"
  if "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$out/$target/" "$corpus" >"$out/$target.log" 2>&1; then
    echo "fuzz: $target: ok ($(grep -o 'stat::number_of_executed_units: *[0-9]*' "$out/$target.log" | grep -o '[0-9]*$') runs in ${seconds}s)"
    passed=$((passed + 1))
  else
    echo "fuzz: $target: FAILED"; grep -E 'ERROR|SUMMARY|artifact' "$out/$target.log" | head -10
    failed=$((failed + 1))
  fi
done
echo "fuzz: ${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
