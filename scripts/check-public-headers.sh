#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The installed headers reach no third-party header: every public header under PREFIX/include is
# compiled alone (so each is self-contained) with only PREFIX/include added to the include path,
# and every file it pulls in must belong to the prefix or to the C/C++ toolchain's own packages
# (glibc, libstdc++, the kernel's headers, gcc's). moodycamel, Boost, liburing, hiredis, OpenSSL,
# SQLite or nlohmann reached from a public header fail it, named with the header that reached it.
# One exception by design: an adapter header (echo/engine/codec_protobuf.h) reaches the library it
# adapts, and only it; a program includes it only when it already uses that library.
# Usage: scripts/check-public-headers.sh PREFIX
set -euo pipefail
prefix=${1:?usage: check-public-headers.sh PREFIX}
cxx=${CXX:-g++}
allowed='^(libc6-dev|libstdc\+\+-[0-9]+-dev|linux-libc-dev|libgcc-[0-9]+-dev|gcc-[0-9]+|libc6|g\+\+-[0-9]+|libstdc\+\+6):'
fail=0
count=0
while IFS= read -r header; do
  count=$((count + 1))
  if ! trace=$("$cxx" -std=c++20 -fsyntax-only -H -I "$prefix/include" -x c++ "$header" 2>&1 >/dev/null); then
    echo "check-public-headers: $header does not compile alone:" >&2
    echo "$trace" | grep -v '^\.' | head -20 >&2
    fail=1
    continue
  fi
  mapfile -t files < <(echo "$trace" | sed -n 's/^\.\+ //p' | sort -u)
  outside=()
  for f in "${files[@]}"; do
    real=$(realpath -m "$f")
    [[ $real == "$(realpath -m "$prefix")"/* ]] || outside+=("$real")
  done
  [[ ${#outside[@]} -eq 0 ]] && continue
  # Which package owns each file outside the prefix; anything not the toolchain's is a leak.
  also='^$'
  [[ $(basename "$header") == codec_protobuf.h ]] && also='^libprotobuf-dev:'
  while IFS= read -r line; do
    if [[ ! $line =~ $allowed && ! $line =~ $also ]]; then
      echo "check-public-headers: $header reaches ${line#*: } (${line%%:*})" >&2
      fail=1
    fi
  done < <(dpkg -S "${outside[@]}" 2>&1 | sed 's/^dpkg-query: no path found matching pattern /unowned: /')
done < <(find "$prefix/include" -name '*.h' | sort)
[[ $count -gt 0 ]] || { echo "check-public-headers: no header under $prefix/include" >&2; exit 1; }
[[ $fail -eq 0 ]] || exit 1
echo "check-public-headers: $count headers, each self-contained, none reaching a third-party header"
