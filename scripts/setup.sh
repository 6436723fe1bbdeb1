#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs what a fresh Debian 12 machine lacks for building, testing and running EchoStore.
# Idempotent: asks apt only for packages that are missing (apt-get update once, then install).
# --peers: also what `echostore bench --peers` runs (bench/peers): Node.js and npm from Debian
# (unless a node and an npm are on PATH already), then the pinned packages (npm ci) into
# bench/peers/node_modules. Neither the default suite nor CI needs them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

peers=0
for arg in "$@"; do
  case $arg in
    --peers) peers=1 ;;
    *) echo "setup: unknown argument '$arg' (only --peers)"; exit 2 ;;
  esac
done

packages=(
  g++ clang libclang-rt-14-dev cmake ninja-build pkg-config git valgrind
  libboost-dev libconcurrentqueue-dev libreaderwriterqueue-dev liburing-dev libhiredis-dev
  libsqlite3-dev libabsl-dev libcli11-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  redis-server redis-tools redis-sentinel locales libssl-dev openssl
  prometheus  # promtool: metrics_endpoint_test checks the /metrics exposition with it
  clang-tidy-14 clang-format-14  # scripts/check-tidy.sh (run-clang-tidy-14 too), check-format.sh
  libprotobuf-dev protobuf-compiler  # codec_protobuf_test: the Protocol Buffers adapter
)

# Debian 12's nodejs is 18.20.4; node-redis 6 declares node >= 20 but its client-side cache runs
# on 18 (docs/benchmarks.md, "Peers"), so npm only warns. A node already on PATH (another
# distribution's) is used as it is: Debian's npm would not install beside it.
if ((peers)) && ! { command -v node && command -v npm; } >/dev/null; then
  packages+=(nodejs npm)
fi

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi

missing=()
for p in "${packages[@]}"; do
  if ! grep -q "install ok installed" <<<"$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -q
  # The tests start their own servers; keep the package's service from starting on 6379.
  DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: every package is present"
fi

# The collation test starts a redis-server under en_US.UTF-8 (Lua's string order follows the
# server's LC_COLLATE): the locale must exist.
if ! grep -qix 'en_US\.utf-\?8' <<<"$(locale -a 2>/dev/null)"; then
  echo "setup: generating the en_US.UTF-8 locale"
  "${sudo_cmd[@]}" sed -i 's/^# *\(en_US\.UTF-8 UTF-8\)/\1/' /etc/locale.gen
  grep -q '^en_US.UTF-8 UTF-8' /etc/locale.gen || echo 'en_US.UTF-8 UTF-8' | "${sudo_cmd[@]}" tee -a /etc/locale.gen >/dev/null
  "${sudo_cmd[@]}" locale-gen
fi

# The peers' pinned packages (bench/peers/package-lock.json), again only when the lockfile changed
# since the last install.
if ((peers)); then
  dir="$root/bench/peers"
  if [[ ! -f $dir/node_modules/.package-lock.json || $dir/package-lock.json -nt $dir/node_modules/.package-lock.json ]]; then
    echo "setup: installing the peers' packages (npm ci --prefix bench/peers)"
    npm ci --prefix "$dir" --no-audit --no-fund
  else
    echo "setup: the peers' packages are installed"
  fi
fi
