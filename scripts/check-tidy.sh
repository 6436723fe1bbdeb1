#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# clang-tidy 14 over the library's sources (ring/ table/ io/ lua/ engine/, src/*.cc, and the
# headers they include from those folders) with the repository's .clang-tidy. Any diagnostic
# fails: exits 1 after printing each one. The compile commands come from build/tidy (or
# ECHO_TIDY_TREE), configured with clang and no tests, benchmarks, CLI or examples; configuring
# is enough (no library header is generated at build time). Runs ECHO_JOBS (default nproc)
# clang-tidy processes at once. `bash scripts/check-tidy.sh FILE...` checks only those files.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. scripts/trees.sh  # configure

tree=${ECHO_TIDY_TREE:-build/tidy}
jobs=${ECHO_JOBS:-$(nproc)}
tidy=clang-tidy-14
command -v "$tidy" >/dev/null || { echo "check-tidy: $tidy not found (scripts/setup.sh installs it)"; exit 1; }

excluded=()  # files not checked (none): a diagnostic located in one is not counted

CC=clang CXX=clang++ configure "$tree" -DCMAKE_BUILD_TYPE=Release -DECHO_BUILD_TESTS=OFF \
  -DECHO_BUILD_BENCH=OFF -DECHO_BUILD_CLI=OFF -DECHO_BUILD_EXAMPLES=OFF \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON

if (($# > 0)); then
  files=("$@")
else
  mapfile -t files < <(git ls-files 'ring/src/*.cc' 'table/src/*.cc' 'io/src/*.cc' 'lua/src/*.cc' \
    'engine/src/*.cc')
fi
skip=" ${excluded[*]} "
run=()
for f in "${files[@]}"; do
  [[ $skip == *" $f "* ]] || run+=("$root/$f")
done
echo "check-tidy: ${#run[@]} files, $jobs at a time"

log=$(mktemp)
status=0  # clang-tidy exits non-zero only when it could not check a file
trap 'rm -f "$log"' EXIT
start=$SECONDS
if command -v run-clang-tidy-14 >/dev/null; then
  # Its file arguments are regular expressions matched against the compile commands' paths:
  # anchored, with their dots escaped (the paths hold no other metacharacter), so that each
  # names exactly one file.
  patterns=()
  for f in "${run[@]}"; do patterns+=("^${f//./\\.}\$"); done
  run-clang-tidy-14 -clang-tidy-binary "$(command -v "$tidy")" -p "$tree" -quiet -j "$jobs" \
    "${patterns[@]}" >"$log" 2>&1 || status=$?
else
  printf '%s\0' "${run[@]}" | xargs -0 -n 1 -P "$jobs" "$tidy" -p "$tree" --quiet >"$log" 2>&1 ||
    status=$?
fi

sed -i 's/\x1b\[[0-9;]*m//g' "$log"  # run-clang-tidy may colour its output
# Keep each diagnostic (a FILE:LINE:COL: warning|error line, its snippet and its notes) unless
# its file is excluded; count the kept ones.
report=$(awk -v root="$root/" -v skip="$skip" '
  match($0, /^[^ :]+:[0-9]+:[0-9]+: (warning|error): /) {
    f = substr($0, 1, index($0, ":") - 1); sub("^" root, "", f)
    keep = index(skip, " " f " ") == 0
    if (keep) n++
    else dropped++
  }
  /^(\/[^ ]*\/)?clang-tidy-14 |^(Running clang-tidy|[0-9]+ warnings? (and [0-9]+ errors? )?generated|Suppressed [0-9]+ warnings|Use -header-filter|Enabled checks)/ { next }
  keep && !/^$/ { print }
  END { printf "%d %d\n", n, dropped > "/dev/stderr" }' "$log" 2>"$log.count")
read -r found dropped <"$log.count"
rm -f "$log.count"
echo "check-tidy: $((SECONDS - start)) s; $found diagnostics"
if ((found > 0)); then
  printf '%s\n' "$report"
  exit 1
fi
if ((status != 0)); then  # no diagnostic, yet a file went unchecked: show everything
  cat "$log"
  echo "check-tidy: clang-tidy failed (exit $status)"
  exit 1
fi
