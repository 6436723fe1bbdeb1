# SPDX-License-Identifier: MIT
# Build flags live on one interface target (never global), linked privately to every target we
# build; BUILD_INTERFACE keeps it out of the exported package.
include_guard(GLOBAL)

add_library(echo_build_flags INTERFACE)
target_compile_features(echo_build_flags INTERFACE cxx_std_20)
target_compile_options(echo_build_flags INTERFACE -Wall -Wextra -Wpedantic -Wshadow
                       -Wno-missing-field-initializers  # designated initializers with defaults
                       $<$<BOOL:${ECHO_WERROR}>:-Werror>)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  # g++ 12 reports -Wrestrict false positives inside std::string at -O2/-O3 (GCC PR 105329).
  target_compile_options(echo_build_flags INTERFACE -Wno-restrict)
endif()
if(ECHO_SANITIZE)
  target_compile_options(echo_build_flags INTERFACE -fsanitize=${ECHO_SANITIZE}
                         -fno-omit-frame-pointer -fno-sanitize-recover=all)
  target_link_options(echo_build_flags INTERFACE -fsanitize=${ECHO_SANITIZE})
  if(ECHO_SANITIZE MATCHES "undefined" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # g++ 12's null check misreports a thread_local reached through an optimised TLS access
    # (the epoch's reader state, table/epoch.h) as a member access within a null pointer; the
    # same code runs clean without the check and under Debug. A real null dereference still
    # stops the run: ASan reports it as SEGV.
    target_compile_options(echo_build_flags INTERFACE -fno-sanitize=null)
  endif()
  if(ECHO_SANITIZE MATCHES "thread" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # g++ warns that TSan does not model std::atomic_thread_fence, which moodycamel's queues
    # use; the stress tests are the judge of what TSan does see.
    target_compile_options(echo_build_flags INTERFACE -Wno-tsan)
  endif()
endif()

# echo_library(<folder> [SOURCES ...] [PUBLIC_DEPS ...] [PRIVATE_DEPS ...])
# Declares echostore_<folder> (alias echostore::<folder>, exported as echostore::<folder>) with
# public headers in <folder>/include. A folder without sources becomes an INTERFACE library.
# Static by default, shared with -DBUILD_SHARED_LIBS=ON (libechostore_<folder>.so.<major.minor>,
# SONAME on the minor version: the package's compatibility is SameMinorVersion). Header-only
# private dependencies belong in PRIVATE_DEPS wrapped in $<BUILD_INTERFACE:...>, so the exported
# package never asks a consumer for them.
function(echo_library folder)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  set(tgt echostore_${folder})
  if(ARG_SOURCES)
    add_library(${tgt} ${ARG_SOURCES})
    target_include_directories(${tgt} PUBLIC
      $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
      $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
    target_link_libraries(${tgt} PUBLIC ${ARG_PUBLIC_DEPS}
                          PRIVATE ${ARG_PRIVATE_DEPS} $<BUILD_INTERFACE:echo_build_flags>)
    target_compile_features(${tgt} PUBLIC cxx_std_20)
    set_target_properties(${tgt} PROPERTIES POSITION_INDEPENDENT_CODE ON
                          VERSION ${PROJECT_VERSION}
                          SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}
                          # A shared library finds its siblings (engine -> io, ring, ...) where it
                          # is installed: a consumer's RUNPATH covers only its direct needs.
                          INSTALL_RPATH "$ORIGIN")
  else()
    add_library(${tgt} INTERFACE)
    target_include_directories(${tgt} INTERFACE
      $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
      $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
    target_link_libraries(${tgt} INTERFACE ${ARG_PUBLIC_DEPS})
    target_compile_features(${tgt} INTERFACE cxx_std_20)
  endif()
  add_library(echostore::${folder} ALIAS ${tgt})
  set_target_properties(${tgt} PROPERTIES EXPORT_NAME ${folder})
  set_property(GLOBAL APPEND PROPERTY ECHO_EXPORTED_TARGETS ${tgt})
  install(DIRECTORY include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endfunction()
