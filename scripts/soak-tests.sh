#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Not part of CI: runs the unit and integration suites N times, as test.sh's first stage builds
# and runs them (scripts/trees.sh), while one busy process per core competes for the CPU, so that
# a test which passes only on a quiet machine fails here rather than at random in CI. Each
# iteration's ctest log goes to build/soak/<timestamp>/iter-K.log; a failing iteration's log is
# kept, a passing one's deleted. Ends with "N passed, M failed" (iterations) and each failed
# iteration's tests; exits 1 if any iteration failed.
#   bash scripts/soak-tests.sh [--filter REGEX] N
# --filter: only the tests whose ctest names it matches (ctest -R), and only their executables
# are built; for chasing one flake.
set -euo pipefail
usage() {
  echo "usage: $0 [--filter REGEX] N   (N >= 1 iterations)" >&2
  exit 64
}
filter=
iterations=
while (($#)); do
  case $1 in
    --filter)
      (($# >= 2)) || usage
      filter=$2
      shift 2
      ;;
    --filter=*)
      filter=${1#--filter=}
      shift
      ;;
    -h | --help) usage ;;
    *)
      [[ -z $iterations ]] || usage
      iterations=$1
      shift
      ;;
  esac
done
[[ $iterations =~ ^[1-9][0-9]*$ ]] || usage

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. scripts/trees.sh  # configure_asan_tree, export_sanitizer_options, asan_suite_args

configure_asan_tree
ctest_args=("${asan_suite_args[@]}" --no-tests=error)
targets=()  # all of them; with a filter, only the executables of the tests it matches
if [[ -n $filter ]]; then
  ctest_args+=(-R "$filter")
  # Each test `<kind>.<name>` is the executable <name> (tests/CMakeLists.txt).
  mapfile -t targets < <(ctest "${ctest_args[@]}" -N |
    sed -nE 's/^[[:space:]]*Test[[:space:]]+#[0-9]+: [a-z]+\.([A-Za-z0-9_]+)$/\1/p')
  if ((${#targets[@]} == 0)); then
    echo "soak: --filter '$filter' matches no unit or integration test" >&2
    exit 64
  fi
fi
# A no-op on a tree already built.
cmake --build build/asan -j "${ECHO_JOBS:-$(nproc)}" ${targets[@]:+--target "${targets[@]}"}
export_sanitizer_options

# The competing load: one busy loop per core, at the niceness the tests run at (this script's),
# killed however the script ends.
load_pids=()
stop_load() {
  local pid
  for pid in "${load_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${load_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  load_pids=()
}
trap stop_load EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
for ((core = 0; core < $(nproc); core++)); do
  nice -n 0 bash -c 'while :; do :; done' &
  load_pids+=($!)
done

results=build/soak/$(date +%Y%m%d-%H%M%S)
mkdir -p "$results"
echo "soak: $iterations iteration(s) of ctest ${ctest_args[*]}"
echo "soak: ${#load_pids[@]} busy process(es) competing; logs in $results"
passed=0
failed=0
report=()
for ((k = 1; k <= iterations; k++)); do
  log=$results/iter-$k.log
  start=$SECONDS
  ok=0
  ctest "${ctest_args[@]}" >"$log" 2>&1 || ok=$?
  # ctest's count ("100% tests passed, 0 tests failed out of 33"), so a run shows what it ran.
  count=$({ grep -oE '[0-9]+ tests failed out of [0-9]+' "$log" || true; } | tail -n 1)
  if ((ok == 0)); then
    passed=$((passed + 1))
    echo "iteration $k/$iterations: passed ($((SECONDS - start)) s; ${count:-no count})"
    rm -f "$log"
  else
    failed=$((failed + 1))
    # ctest's own list ("  12 - integration.x_test (Failed)"), then the gtest cases that failed
    # inside them (--gtest_brief prints each "[  FAILED  ] Suite.Case" once per failure).
    tests=$(sed -n '/The following tests FAILED:/,$p' "$log" |
      sed -nE 's/^[[:space:]]*[0-9]+ - ([^ ]+) \(([^)]*)\).*$/\1 (\2)/p' | paste -sd ' ' -)
    cases=$({ grep -oE '^\[  FAILED  \] [A-Za-z0-9_/]+\.[A-Za-z0-9_/.]+' "$log" || true; } |
      awk '{print $4}' | sort -u | paste -sd ' ' -)
    line="iteration $k: ${tests:-(no failed test named: see the log)}"
    if [[ -n $cases ]]; then line+="; cases: $cases"; fi
    report+=("$line  [$log]")
    echo "iteration $k/$iterations: FAILED ($((SECONDS - start)) s; ${count:-no count}):" \
      "${tests:-see $log}"
  fi
done
stop_load

echo
echo "$passed passed, $failed failed"
for line in "${report[@]}"; do echo "  $line"; done
((failed == 0))
