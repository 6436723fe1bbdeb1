#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# clang-format 14 with the repository's .clang-format, as a check: changes nothing, prints each
# place a file differs from its formatted self and exits 1 if any does. `bash
# scripts/check-format.sh FILE...` checks those files; with no argument, every C++ source and
# header git tracks under ring table io lua engine cli bench harness perf tests examples.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
format=clang-format-14
command -v "$format" >/dev/null || { echo "check-format: $format not found (scripts/setup.sh installs it)"; exit 1; }

if (($# > 0)); then
  files=("$@")
else
  mapfile -t files < <(git ls-files -- ring table io lua engine cli bench harness perf tests examples |
    grep -E '\.(cc|h|cpp|hpp|cxx|hh|inl)$')
fi
((${#files[@]})) || { echo "check-format: no files"; exit 0; }

bad=()
for f in "${files[@]}"; do
  if ! "$format" --style=file --dry-run --Werror "$f"; then bad+=("$f"); fi
done
echo "check-format: ${#files[@]} files, ${#bad[@]} not formatted"
if ((${#bad[@]})); then
  printf '  %s\n' "${bad[@]}"
  echo "fix with: clang-format-14 -i --style=file FILE..."
  exit 1
fi
