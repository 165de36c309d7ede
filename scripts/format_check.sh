#!/usr/bin/env bash
# Checks that every tracked C++ and CUDA source is formatted by clang-format with the repository's
# .clang-format (Google style, 100 columns). Prints "format: ok (N files)" or the files that differ
# and how to fix them, and exits 1. Run by scripts/test.sh; fix with:
#   git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | xargs clang-format -i
set -uo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null 2>&1; then
  echo "format: clang-format is not installed (bash scripts/setup.sh installs it)"
  exit 1
fi
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -eq 0 ]; then
  echo "format: ok (${#files[@]} files, $(clang-format --version | grep -oE 'version [0-9.]+'))"
  exit 0
fi
echo "format: ${#bad[@]} of ${#files[@]} files differ from clang-format:"
printf '  %s\n' "${bad[@]}"
echo "format: fix with: clang-format -i ${bad[*]}"
exit 1
