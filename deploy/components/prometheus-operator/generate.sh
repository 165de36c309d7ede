#!/usr/bin/env bash
# Regenerates prometheus-rule.yaml and grafana-dashboards.yaml from dashboards/ (after editing the
# rules or a dashboard). Extra arguments go to generate.mjs (--check: only compare).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
node "$here/generate.mjs" "$(bash "$here/../../tools/tools.sh" dir)" "$here/../../.." "$@"
