#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Fails when any hot operation costs more than 10% more instructions than perf/baseline.txt
# (a Release build by g++ on Debian 12; refresh the baseline with callgrind_ops.sh when a change
# is meant to cost more, and say why in the commit).
#   perf/check_ops.sh [BUILD_DIR (default build/release)]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
now=$(bash "$root/perf/callgrind_ops.sh" "${1:-build/release}")
echo "$now"
status=0
while read -r op base; do
  [[ -z $op || $op == \#* ]] && continue
  cur=$(awk -v op="$op" '$1 == op {print $2}' <<<"$now")
  if [[ -z $cur ]]; then echo "check_ops: $op not measured"; status=1; continue; fi
  if awk -v c="$cur" -v b="$base" 'BEGIN {exit !(c > 1.10 * b)}'; then
    echo "check_ops: $op regressed: $cur instructions per op vs baseline $base (> +10%)"
    status=1
  else
    awk -v op="$op" -v c="$cur" -v b="$base" 'BEGIN {printf "check_ops: %s %.1f vs %.1f (%.2fx) ok\n", op, c, b, c / b}'
  fi
done <"$root/perf/baseline.txt"
exit $status
