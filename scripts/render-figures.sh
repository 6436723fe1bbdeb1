#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Renders the generated figure tables of README.md and docs/*.md from the dated JSON results in
# docs/figures/ (docs/figures/tables.cmake names each table, its JSON and its rows); the prose
# around each `<!-- figures:begin NAME -->` ... `<!-- figures:end NAME -->` region is left alone.
# With --check it writes nothing and fails, naming the file and the table, when a committed region
# differs from what its JSON gives. Needs only cmake (its JSON parser): no build, no server.
#   scripts/render-figures.sh [--check]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=write
case ${1:-} in
  '') ;;
  --check) mode=check ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac
cmake -DROOT="$root" -DMODE="$mode" -P "$root/scripts/render-figures.cmake"
