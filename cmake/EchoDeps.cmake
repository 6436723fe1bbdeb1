# SPDX-License-Identifier: MIT
# Every third-party dependency as an imported target. Installed beside the package config too,
# so a consumer of find_package(echostore) recreates the same targets (static libraries carry
# their private link dependencies).
include_guard(GLOBAL)
include(CMakeFindDependencyMacro)
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(Boost 1.74 REQUIRED)                       # Boost::headers (Lockfree is header-only)
find_package(SQLite3 REQUIRED)                          # SQLite::SQLite3
find_package(nlohmann_json 3 REQUIRED)                  # nlohmann_json::nlohmann_json (stats export)
find_package(OpenSSL 3 REQUIRED)                        # OpenSSL::SSL (io's TLS; Debian's libssl-dev)
pkg_check_modules(echo_liburing REQUIRED IMPORTED_TARGET GLOBAL liburing>=2.1)
pkg_check_modules(echo_hiredis REQUIRED IMPORTED_TARGET GLOBAL hiredis>=0.14)

# moodycamel ships headers only and no CMake package on Debian.
if(NOT TARGET moodycamel::concurrentqueue)
  find_path(ECHO_CONCURRENTQUEUE_DIR concurrentqueue/concurrentqueue.h REQUIRED)
  add_library(moodycamel::concurrentqueue INTERFACE IMPORTED GLOBAL)
  target_include_directories(moodycamel::concurrentqueue INTERFACE ${ECHO_CONCURRENTQUEUE_DIR})
endif()
if(NOT TARGET moodycamel::readerwriterqueue)
  find_path(ECHO_READERWRITERQUEUE_DIR readerwriterqueue/readerwriterqueue.h REQUIRED)
  add_library(moodycamel::readerwriterqueue INTERFACE IMPORTED GLOBAL)
  target_include_directories(moodycamel::readerwriterqueue INTERFACE ${ECHO_READERWRITERQUEUE_DIR})
endif()
if(NOT TARGET echo::uring)
  add_library(echo::uring ALIAS PkgConfig::echo_liburing)
endif()
if(NOT TARGET echo::hiredis)
  add_library(echo::hiredis ALIAS PkgConfig::echo_hiredis)
endif()
