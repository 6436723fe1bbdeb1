#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The package as a consumer meets it (scripts/test.sh's release step runs this after building
# build/release). Four ways in, each building tests/package/consumer.cc and running it against a
# redis-server it starts through echostore::testing:
#   1. the static libraries installed to a prefix: every installed header self-contained and
#      reaching no third-party header (check-public-headers.sh), find_package(echostore);
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
trap 'rm -rf "$work"' EXIT

consumer() {  # consumer <build dir> <cmake args...>: configure, build, run
  local dir=$1
  shift
  cmake -S tests/package -B "$dir" -G Ninja "$@" >/dev/null
  cmake --build "$dir" >/dev/null
  "$dir/consumer"
}

echo "== 1. static, installed prefix, find_package"
cmake --install build/release --prefix "$work/static" >/dev/null
bash scripts/check-public-headers.sh "$work/static"
consumer "$work/c-static" -DCMAKE_PREFIX_PATH="$work/static"

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
trap 'dpkg -r echostore >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
consumer "$work/c-deb"
# (Debian 12 merges /lib into /usr/lib: ldd may name either.)
grep -Eq "libechostore_engine\.so[.0-9]* => (/usr)?/lib/libechostore" <<<"$(ldd "$work/c-deb/consumer")" ||
  { echo "check-package: the .deb consumer does not load /usr/lib's library" >&2; exit 1; }
dpkg -r echostore >/dev/null
echo "check-package: static prefix, pkg-config, shared prefix and the .deb all build and run the consumer"
