#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Samples the hot operations (perf_ops: ring publish+drain, L1 hit, apply of one drop, decode of
# one push) with `perf record` and prints where the time goes, per function. Complements
# callgrind_ops.sh (exact instruction counts, slow) with real-time sampling (fast, noisy).
# Uses the hardware cycles event when the machine has a PMU; on a VM without one (this CI VM)
# it falls back to the software cpu-clock event and says so. Exits 0 with a message when perf
# is absent or the kernel forbids sampling: profiling is a tool, not a gate.
#   perf/perf_record.sh [BUILD_DIR (default build/release)] [OUT_DIR (default: a new temp dir)]
set -euo pipefail
build=${1:-build/release}
out=${2:-}
ops="$build/perf/perf_ops"
[[ -x $ops ]] || { echo "perf_record: $ops not built (ECHO_BUILD_BENCH=ON)" >&2; exit 2; }
if ! command -v perf >/dev/null || ! perf --version >/dev/null 2>&1; then
  echo "perf_record: perf is not installed (Debian: apt-get install linux-perf); nothing profiled"
  exit 0
fi
paranoid=$(cat /proc/sys/kernel/perf_event_paranoid 2>/dev/null || echo unknown)
if [[ $(id -u) -ne 0 && $paranoid =~ ^[0-9]+$ && $paranoid -gt 2 ]]; then
  echo "perf_record: kernel.perf_event_paranoid is $paranoid: unprivileged sampling is off;"
  echo "  run as root or: sysctl kernel.perf_event_paranoid=2 (user-space samples only). Nothing profiled."
  exit 0
fi
# `perf stat` prints "<not supported>" for cycles when there is no PMU (most VMs).
if perf stat -x, -e cycles true 2>&1 | grep -q '^[0-9]'; then
  event=cycles
  echo "perf_record: sampling hardware cycles (perf_event_paranoid $paranoid)"
else
  event=cpu-clock
  echo "perf_record: hardware counters are unavailable here (no PMU: a VM?); sampling the"
  echo "  software cpu-clock event instead (a timer interrupt: per-sample CPU time, no cycles,"
  echo "  and skid to the instruction after the interrupt). perf_event_paranoid $paranoid."
fi
[[ -n $out ]] || out=$(mktemp -d)
mkdir -p "$out"
data="$out/perf.data"
# Four runs of 10^6 of each op; DWARF call chains (a Release build keeps no frame pointers) so
# each echo_perf_<op> entry point gets its inclusive share.
if ! perf record -q -e "$event" -F 2000 --call-graph dwarf,8192 -o "$data" -- \
  bash -c "for i in 1 2 3 4; do '$ops' 1000000 >/dev/null || exit 1; done" \
  2>"$out/record.log"; then
  if grep -qiE 'permission|not permitted|paranoid|Access to performance monitoring' "$out/record.log"; then
    echo "perf_record: the kernel refused sampling:"
    sed 's/^/  /' "$out/record.log"
    echo "  Nothing profiled."
    exit 0
  fi
  cat "$out/record.log" >&2
  echo "perf_record: perf record failed (log above)" >&2
  exit 1
fi
echo "perf_record: $data ($event); per function, self time:"
perf report -i "$data" --stdio --no-children --sort symbol --percent-limit 1 2>/dev/null |
  grep -vE '^#|^$' | grep -E '^ +[0-9.]+%' | head -25
echo "perf_record: per hot op (inclusive, the echo_perf_* entry points):"
perf report -i "$data" --stdio --children --sort symbol 2>/dev/null |
  grep -E '^ +[0-9.]+% +[0-9.]+% .*echo_perf_' | head -8
echo "perf_record: the rest is perf_ops setting up (minting ids, filling the map and the ring)."
echo "perf_record: browse with: perf report -i $data (DWARF chains: ~150 MB)"
