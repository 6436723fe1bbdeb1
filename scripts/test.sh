#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# README command 2 (and .ci/run): install what is missing, then build and run the whole suite,
# each kind of evidence in its own tree:
#   build/asan     unit + integration tests under ASan+UBSan (integration starts real servers)
#   build/debug    the ring and map unit tests in Debug (their debug-only ownership checks)
#   build/tsan     stress tests under TSan
#   build/tidy     configured only: the compile commands clang-tidy reads (scripts/check-tidy.sh)
#   build/fuzz     libFuzzer targets (clang), each run for ECHO_FUZZ_SECONDS (default 30)
#   build/release  the CLI, the benchmarks (built, not timed), `echostore bench --quick --json`
#                  (every row present and finite), a short `echostore referee` (both sides of the
#                  face-off), the instruction-count check, and the installed package proven by
#                  the consumer project in tests/package (static, pkg-config, shared, .deb) and
#                  by examples/first_node (static)
# Exits non-zero on the first failure; ends with "N passed, M failed".
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
. scripts/trees.sh  # configure, configure_asan_tree, export_sanitizer_options, asan_suite_args

fuzz_seconds=${ECHO_FUZZ_SECONDS:-30}
jobs=${ECHO_JOBS:-$(nproc)}
passed=0
failed=0
step() { printf '\n==== %s\n' "$*"; }
fail() {
  failed=$((failed + 1))
  echo "FAILED: $1"
  echo "$passed passed, $failed failed"
  exit 1
}
record() {  # record <name> <command...>: one check
  local name=$1
  shift
  if "$@"; then passed=$((passed + 1)); else fail "$name"; fi
}
record_ctest() {  # record_ctest <name> <ctest args...>: counts every test ctest ran
  local name=$1 log
  shift
  log=$(mktemp)
  if ctest "$@" 2>&1 | tee "$log"; then
    passed=$((passed + $(grep -oE 'out of [0-9]+' "$log" | grep -oE '[0-9]+' || echo 0)))
    rm -f "$log"
  else
    rm -f "$log"
    fail "$name"
  fi
}

# Every relative link of README.md, docs/ and examples/*/README.md resolves.
record doc-links bash scripts/check-doc-links.sh
# Every generated figure table of README.md and docs/ matches its dated JSON in docs/figures/.
record figures bash scripts/render-figures.sh --check
# Every <!-- snippet: PATH MARK --> block of the docs equals PATH's marked lines (README's
# embedding is examples/first_node/first_node.cc, which check-package.sh builds and runs).
record snippets bash scripts/check-snippets.sh
# clang-tidy over the library's sources with .clang-tidy (its own configure-only tree, build/tidy):
# any diagnostic fails.
record tidy bash scripts/check-tidy.sh
# clang-format-14 with .clang-format over every C++ file git tracks: any file that differs fails.
record format bash scripts/check-format.sh

step "unit + integration under ASan+UBSan"
configure_asan_tree
cmake --build build/asan -j "$jobs"
export_sanitizer_options
record_ctest asan "${asan_suite_args[@]}"

step "debug-only checks (second writer / producer aborts): the ring and map unit tests in Debug"
# The sanitizer trees define NDEBUG, which compiles these checks (and their death tests) away.
configure build/debug -DCMAKE_BUILD_TYPE=Debug -DECHO_TEST_KINDS=unit -DECHO_BUILD_BENCH=OFF \
  -DECHO_BUILD_CLI=OFF -DECHO_BUILD_EXAMPLES=OFF
# Every tests/unit/l1_map_*_test.cc: the ctest filter below runs each one the glob registers.
mapfile -t l1_map_tests < <(cd tests/unit && for f in l1_map_*_test.cc; do echo "${f%.cc}"; done)
cmake --build build/debug -j "$jobs" --target spsc_ring_test "${l1_map_tests[@]}" l1_eviction_test
record_ctest debug --test-dir build/debug -R 'unit\.(spsc_ring_test|l1_map_[a-z_]+_test|l1_eviction_test)$' \
  --output-on-failure

step "stress under TSan"
configure build/tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DECHO_SANITIZE=thread \
  -DECHO_TEST_KINDS=stress -DECHO_BUILD_BENCH=OFF -DECHO_BUILD_CLI=OFF
cmake --build build/tsan -j "$jobs"
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
if grep -q 'Total Tests: 0' <<<"$(ctest --test-dir build/tsan -N -L stress)"; then
  echo "no stress tests yet"
else
  record_ctest tsan --test-dir build/tsan -L stress --output-on-failure
fi

step "fuzzers, ${fuzz_seconds}s each"
CC=clang CXX=clang++ configure build/fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DECHO_BUILD_FUZZ=ON \
  -DECHO_BUILD_TESTS=OFF -DECHO_BUILD_BENCH=OFF -DECHO_BUILD_CLI=OFF \
  -DECHO_SANITIZE=address,undefined,fuzzer-no-link
cmake --build build/fuzz -j "$jobs"
for fuzzer in build/fuzz/tests/fuzz/*_fuzz; do
  name=$(basename "$fuzzer" _fuzz)
  work=$(mktemp -d)
  seeds=()
  if [[ -d tests/fuzz/corpus/$name ]]; then seeds=("tests/fuzz/corpus/$name"); fi
  echo "-- $name"
  # New inputs go to a scratch corpus; the repo's seeds are read only. Any finding fails.
  record "fuzz $name" "$fuzzer" -max_total_time="$fuzz_seconds" -print_final_stats=1 \
    -artifact_prefix="$work/" "$work" "${seeds[@]}"
  rm -rf "$work"
done

step "release: CLI, benchmarks, instruction counts, installed package"
configure build/release -DCMAKE_BUILD_TYPE=Release -DECHO_BUILD_BENCH=ON -DECHO_BUILD_TESTS=ON \
  -DECHO_TEST_KINDS=cli
cmake --build build/release -j "$jobs"
# The program as an operator meets it (tests/integration/cli_test.cc): usage errors, strict
# --server, stats and journal refusals, credentials, the drill's check of its server.
record_ctest cli --test-dir build/release -L cli --output-on-failure
# The drill is README command 1, not part of this suite: its latency and throughput gates derive
# bands from floors on a shared machine (performance belongs to benchmarks, never to a timed
# test), and its correctness claims are the integration tests' (tests/integration/*). Its F6
# once failed "every job applied once, none stale" here while passing 3 of 3 locally.
build/release/cli/echostore --help >/dev/null
# The side-by-side suite runs every row against its own server; the check reads its JSON (every
# row present, every figure and ratio finite), never the figures' size (a shared VM's noise).
record bench-quick bash perf/check_bench.sh build/release
# The Cache Referee, short: it exits non-zero unless EchoStore's three lanes show 0 stale reads
# and 0 permanently stale rows and the classic contestants show the race it measures.
record referee-quick build/release/cli/echostore referee --quick --seconds 2
# The chaos drill: three nodes behind fault proxies under random network and server
# faults for 60 s; it exits non-zero unless 0 stale and 0 phantom reads, 0 permanently stale rows,
# 0 writes lost in L2, 0 journal intents lost, and the longest staleness within the bound (the
# heartbeat's detection + a resubscribe) measured in the same run. A failure prints its --seed.
record chaos-60 build/release/cli/echostore drill --chaos 60
if command -v valgrind >/dev/null; then  # instructions per hot op vs perf/baseline.txt (+10% fails)
  record perf-ops bash perf/check_ops.sh build/release
fi
# The package four ways (scripts/check-package.sh): the static prefix with every public header
# self-contained and reaching no third-party header (and examples/first_node built against it and
# run, two copies at once), pkg-config alone, a shared build, its .deb.
record package bash scripts/check-package.sh "$jobs"

echo
echo "$passed passed, $failed failed"
