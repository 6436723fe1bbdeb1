#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs `echostore bench --quick --json` (its own redis-server on a free loopback port) and checks
# the JSON with check_bench.cmake: every row present with a finite ratio. A smoke run that keeps
# the command from rotting, not a performance gate (the figures on a shared VM are noise-bound).
#   perf/check_bench.sh [BUILD_DIR (default build/release)]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cli="${1:-build/release}/cli/echostore"
[[ -x $cli ]] || { echo "check_bench: $cli not built" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$cli" bench --quick --json "$work/bench.json"
cmake -DJSON="$work/bench.json" -P "$root/perf/check_bench.cmake"
