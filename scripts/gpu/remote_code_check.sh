#!/usr/bin/env bash
# On the GPU machine: the exports of scripts/gpu/make_remote_code_check.sh (carried as DIR,
# default .device/remote_code) loaded in transformers against our logits and continuations
# (scripts/gpu/remote_code_transformers.py), with FLA's source (FLA_DIR, default .fla: the
# directory holding its fla/ package) for the FLA-format one. Logs to stdout.
#   [FLA_DIR=.fla] bash scripts/gpu/remote_code_check.sh [DIR]
set -uo pipefail
dir=${1:-.device/remote_code}
export PYTHONPATH="$PWD/${FLA_DIR:-.fla}${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 400 python3 scripts/gpu/remote_code_transformers.py "$dir" 2>&1 | grep -v "^\s*$" | tail -60
