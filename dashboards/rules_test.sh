#!/usr/bin/env bash
# The Prometheus rules and configuration, checked and unit-tested by promtool (Debian's
# `prometheus` package, installed by scripts/setup.sh): every alert fires and stays quiet where
# dashboards/prometheus/rules_test.yaml says.
set -euo pipefail
if ! command -v promtool >/dev/null 2>&1; then
  echo "rules_test: promtool not found; run scripts/setup.sh (Debian package prometheus)" >&2
  exit 1
fi
cd dashboards/prometheus
promtool check rules rules.yaml
promtool test rules rules_test.yaml
