#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Instructions per hot operation, counted by callgrind (repeatable on a noisy machine, unlike
# time): runs perf_ops once per operation with --toggle-collect on that operation's function and
# divides the collected instructions by N. Prints "<op> <instructions per op>" per line.
#   perf/callgrind_ops.sh [BUILD_DIR (default build/release)] [N (default 20000)]
set -euo pipefail
build=${1:-build/release}
n=${2:-20000}
ops="$build/perf/perf_ops"
[[ -x $ops ]] || { echo "callgrind_ops: $ops not built (ECHO_BUILD_BENCH=ON)" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "callgrind_ops: valgrind not installed" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for op in ring l1_hit apply_drop decode_push typed_first_hit typed_hit handle_hit flat_hit; do
  out="$work/$op.out"
  valgrind --tool=callgrind --toggle-collect="echo_perf_$op" --callgrind-out-file="$out" \
    "$ops" "$n" >/dev/null 2>"$work/$op.log" || { cat "$work/$op.log" >&2; exit 1; }
  total=$(awk '/^(totals|summary):/ {print $2; exit}' "$out")
  [[ -n $total ]] || { echo "callgrind_ops: no totals for $op" >&2; exit 1; }
  awk -v op="$op" -v t="$total" -v n="$n" 'BEGIN {printf "%s %.1f\n", op, t / n}'
done
