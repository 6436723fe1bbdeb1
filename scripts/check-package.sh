#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The package as a consumer meets it (scripts/test.sh's release step runs this after building
# build/release). Four ways in, each building tests/package/consumer.cc and running it against a
# redis-server it starts through echostore::testing:
#   1. the static libraries installed to a prefix: every installed header self-contained and
#      reaching no third-party header (check-public-headers.sh), find_package(echostore); and
#      examples/first_node, its own project, built against that prefix as its README says and run
#      against a redis-server started here on a free loopback port: alone, then two copies at once
#      beside a node another process holds (each leases its own node id);
#   2. the same prefix through pkg-config alone (pkg-config --static echostore echostore-testing);
#   3. a shared build (BUILD_SHARED_LIBS=ON, build/shared) installed to a prefix;
#   4. that build's Debian package (`cpack -G DEB`), installed with dpkg, found at /usr without
#      any prefix path, then removed (only when run as root, as CI is; said so otherwise).
# Usage: scripts/check-package.sh [jobs]
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${1:-2}
. scripts/trees.sh
work=$(mktemp -d)
server_pid=
cleanup() {
  if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

consumer() {  # consumer <build dir> <cmake args...>: configure, build, run
  local dir=$1
  shift
  cmake -S tests/package -B "$dir" -G Ninja "$@" >/dev/null
  cmake --build "$dir" >/dev/null
  "$dir/consumer"
}

# A redis-server of our own on a free loopback port, never 6379: sets server_pid and server_port.
start_server() {
  local tries info
  for tries in {1..20}; do
    server_port=$((20000 + RANDOM % 12000))  # below the kernel's ephemeral range (32768..60999)
    redis-server --port "$server_port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
      --dir "$work" >"$work/redis.log" 2>&1 &
    server_pid=$!
    # Ours once the port answers with our pid; our exit means the port was taken.
    while kill -0 "$server_pid" 2>/dev/null; do
      info=$(redis-cli -p "$server_port" info server 2>/dev/null | tr -d '\r') || true
      if grep -qx "process_id:$server_pid" <<<"$info"; then return 0; fi
      sleep 0.05
    done
    wait "$server_pid" || true
  done
  echo "check-package: no redis-server in $tries tries: $(tail -1 "$work/redis.log")" >&2
  exit 1
}

stop_server() {
  kill "$server_pid"
  wait "$server_pid" || true
  server_pid=
}

echo "== 1. static, installed prefix, find_package"
cmake --install build/release --prefix "$work/static" >/dev/null
bash scripts/check-public-headers.sh "$work/static"
consumer "$work/c-static" -DCMAKE_PREFIX_PATH="$work/static"

echo "== 1. static, installed prefix: examples/first_node"
cmake -S examples/first_node -B "$work/first-node" -G Ninja -DCMAKE_PREFIX_PATH="$work/static" \
  >/dev/null
cmake --build "$work/first-node" >/dev/null
first_node=$work/first-node/first_node
start_server
"$first_node" "127.0.0.1:$server_port" | tee "$work/alone"
node=$(grep -oE '^node [0-9]+' "$work/alone" | cut -d' ' -f2)
# Its node held as a live process holds it (docs/wire.md, "Node leases"): the two copies beside it
# must lease others, one named by its argument, one by $ECHO_SERVER.
redis-cli -p "$server_port" set "{ecc}:node:$node" check-package px 60000 >/dev/null
"$first_node" "127.0.0.1:$server_port" >"$work/a" 2>&1 &
a=$!
ECHO_SERVER=127.0.0.1:$server_port "$first_node" >"$work/b" 2>&1 &
b=$!
a_rc=0 b_rc=0
wait "$a" || a_rc=$?
wait "$b" || b_rc=$?
cat "$work/a" "$work/b"
if ((a_rc != 0 || b_rc != 0)) || grep -q "^node $node " "$work/a" "$work/b"; then
  echo "check-package: first_node: two copies beside node $node: exits $a_rc and $b_rc" >&2
  exit 1
fi
stop_server
# No server: exit 1 and the cause, after start()'s timeout.
if "$first_node" "127.0.0.1:$server_port" 2>"$work/down"; then
  echo "check-package: first_node succeeded without a server" >&2
  exit 1
fi
cat "$work/down"
grep -q '^first_node: start: ' "$work/down"

echo "== 2. static, pkg-config only"
pc_flags=$(PKG_CONFIG_PATH="$work/static/lib/pkgconfig" pkg-config --static --cflags --libs \
  echostore-testing echostore)
# shellcheck disable=SC2086 # the flags are words
g++ -std=c++20 -O1 tests/package/consumer.cc -o "$work/consumer-pc" $pc_flags
"$work/consumer-pc"

echo "== 3. shared, installed prefix"
configure build/shared -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DECHO_BUILD_TESTS=OFF \
  -DECHO_BUILD_BENCH=OFF -DECHO_BUILD_CLI=OFF -DECHO_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build/shared -j "$jobs" >/dev/null
cmake --install build/shared --prefix "$work/shared" >/dev/null
ls "$work/shared/lib/libechostore_engine.so."* >/dev/null
consumer "$work/c-shared" -DCMAKE_PREFIX_PATH="$work/shared"
# Here-strings, not pipes, into grep -q: under pipefail its early exit could end ldd with SIGPIPE
# and fail a check that matched (it did, once, in a CI run).
grep -q "$work/shared/lib/libechostore_engine.so" <<<"$(ldd "$work/c-shared/consumer")" ||
  { echo "check-package: the shared consumer does not load the installed library" >&2; exit 1; }

echo "== 4. the Debian package"
(cd build/shared && rm -f echostore_*.deb && cpack -G DEB >/dev/null)
deb=$(ls build/shared/echostore_*.deb)
dpkg-deb -I "$deb" | grep -E '^ (Package|Version|Depends):'
if [[ $(id -u) -ne 0 ]]; then
  echo "check-package: not root: $deb built, its install not tried (CI runs as root)"
  exit 0
fi
if dpkg -s echostore >/dev/null 2>&1; then
  echo "check-package: a package named echostore is installed already: not replacing it" >&2
  exit 1
fi
dpkg -i "$deb" >/dev/null
trap 'dpkg -r echostore >/dev/null 2>&1 || true; cleanup' EXIT
consumer "$work/c-deb"
# (Debian 12 merges /lib into /usr/lib: ldd may name either.)
grep -Eq "libechostore_engine\.so[.0-9]* => (/usr)?/lib/libechostore" <<<"$(ldd "$work/c-deb/consumer")" ||
  { echo "check-package: the .deb consumer does not load /usr/lib's library" >&2; exit 1; }
dpkg -r echostore >/dev/null
echo "check-package: static prefix, pkg-config, shared prefix and the .deb all build and run the consumer"
echo "check-package: first_node, built against the static prefix, runs two copies at once"
