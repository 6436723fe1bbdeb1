#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# README command 1: install what is missing, build the release tree, run `echostore drill`
# (which starts its own redis-server on a free loopback port). Extra arguments go to the drill.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DECHO_BUILD_TESTS=OFF \
      -DECHO_BUILD_BENCH=OFF >/dev/null
cmake --build build/release --target echostore_cli
exec build/release/cli/echostore drill "$@"
