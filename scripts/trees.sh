# SPDX-License-Identifier: MIT
# Sourced (from the repository root) by test.sh and soak-tests.sh: how a build tree is configured,
# and the ASan tree of unit and integration tests with the sanitizer options its tests run under,
# kept in one place so that the soak runs exactly the build CI's first stage runs.

configure() {  # configure <dir> <cmake args...>
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja -DECHO_WERROR=ON "$@" >/dev/null
}

configure_asan_tree() {  # build/asan: unit + integration under ASan+UBSan
  configure build/asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DECHO_SANITIZE=address,undefined \
    -DECHO_TEST_KINDS="unit;integration" -DECHO_BUILD_BENCH=OFF -DECHO_BUILD_CLI=OFF
}

export_sanitizer_options() {  # leaks fail a test; the first sanitizer report stops it
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
}

# ctest's arguments for that tree's suites, as CI's first stage runs them.
asan_suite_args=(--test-dir build/asan -L 'unit|integration' --output-on-failure -j 2)
