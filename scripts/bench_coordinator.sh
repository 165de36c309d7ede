#!/usr/bin/env bash
# Builds and runs the coordinator benchmark (//bench:coordinator_bench): durable
# submissions/s over loopback, scheduling pass p50/p99 with 10k queued jobs and 1k fake workers,
# restart time with 100k jobs. Figures go into docs/PERFORMANCE.md. (.bazelrc already builds with -O2.)
# Usage: scripts/bench_coordinator.sh [benchmark flags...]
set -euo pipefail
cd "$(dirname "$0")/.."

bazel build //bench:coordinator_bench
exec bazel-bin/bench/coordinator_bench "$@"
