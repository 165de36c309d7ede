#!/usr/bin/env bash
# docs/mesactl.md's command reference is mesactl's own help (`mesactl --help` and each command's
# `--help`), between its BEGIN/END markers, so the document cannot drift from the binary.
#
#   bash cli/help_reference.sh [MESACTL [DOC]]          rewrite the section (after bazel build)
#   bash cli/help_reference.sh --check MESACTL DOC      exit 1 if it differs (//cli:help_reference_test)
set -euo pipefail

check=0
if [[ ${1:-} == --check ]]; then
  check=1
  shift
fi
mesactl=${1:-bazel-bin/cli/mesactl}
doc=${2:-docs/mesactl.md}
begin='<!-- BEGIN mesactl help: written by cli/help_reference.sh from the binary; do not edit -->'
end='<!-- END mesactl help -->'

for f in "$mesactl" "$doc"; do
  [[ -e $f ]] || { echo "help_reference: $f not found (bazel build //cli:mesactl first)" >&2; exit 2; }
done
for marker in "$begin" "$end"; do
  grep -qxF -- "$marker" "$doc" || { echo "help_reference: $doc lacks the line: $marker" >&2; exit 2; }
done

# The commands, in the order of the help's "Commands:" section.
commands=$("$mesactl" --help | awk '/^Commands:$/ { on = 1; next } on && /^$/ { exit }
                                    on && /^  [a-z]/ { print $1 }')
[[ -n $commands ]] || { echo "help_reference: no commands in '$mesactl --help'" >&2; exit 2; }

generated=$(mktemp)
current=$(mktemp)
trap 'rm -f "$generated" "$current"' EXIT
{
  echo "$begin"
  for command in "" $commands; do
    echo
    echo '```'
    echo "\$ mesactl ${command:+$command }--help"
    "$mesactl" $command --help
    echo '```'
  done
  echo
  echo "$end"
} >"$generated"
awk -v b="$begin" -v e="$end" '$0 == b { on = 1 } on { print } $0 == e { on = 0 }' "$doc" >"$current"

if ((check)); then
  if ! diff -u "$current" "$generated"; then
    echo "help_reference: $doc's command reference differs from mesactl's help (above);" \
      "run: bazel build //cli:mesactl && bash cli/help_reference.sh" >&2
    exit 1
  fi
  echo "help_reference: $doc matches mesactl's help"
  exit 0
fi
# Atomically: the new document beside the old, then renamed over it.
tmp="$doc.tmp.$$"
awk -v b="$begin" -v e="$end" -v g="$generated" '
  $0 == b { while ((getline line < g) > 0) print line; skip = 1; next }
  $0 == e { skip = 0; next }
  !skip { print }' "$doc" >"$tmp"
mv "$tmp" "$doc"
echo "help_reference: wrote $doc"
