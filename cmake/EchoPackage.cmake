# SPDX-License-Identifier: MIT
# Install and export the CMake package `echostore` (find_package(echostore)), its pkg-config file
# and, through CPack, a Debian package (`cpack -G DEB` in a build tree: the libraries, headers,
# CMake and pkg-config files, and the `echostore` program when it is built). Proven by
# tests/package/ (scripts/test.sh: the installed prefix, pkg-config and the .deb).
include_guard(GLOBAL)
include(CMakePackageConfigHelpers)
get_property(echo_targets GLOBAL PROPERTY ECHO_EXPORTED_TARGETS)
install(TARGETS ${echo_targets} echostore EXPORT echostoreTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
set(echo_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/echostore)
install(EXPORT echostoreTargets NAMESPACE echostore:: DESTINATION ${echo_cmake_dir})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/echostoreConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/echostoreConfig.cmake INSTALL_DESTINATION ${echo_cmake_dir})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/echostoreConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
if(BUILD_SHARED_LIBS)
  set(ECHO_PACKAGE_SHARED ON)
else()
  set(ECHO_PACKAGE_SHARED OFF)
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/echostoreDeps.cmake.in
               ${CMAKE_CURRENT_BINARY_DIR}/echostoreDeps.cmake @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/echostoreConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/echostoreConfigVersion.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/echostoreDeps.cmake
        DESTINATION ${echo_cmake_dir})
foreach(pc echostore echostore-testing)
  configure_file(${CMAKE_CURRENT_LIST_DIR}/${pc}.pc.in ${CMAKE_CURRENT_BINARY_DIR}/${pc}.pc @ONLY)
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/${pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()

# The Debian package. Its runtime dependencies are Debian 12's library packages (a shared
# build's libraries need them; a static build's consumers link them: then the -dev packages).
set(CPACK_PACKAGE_NAME echostore)
set(CPACK_PACKAGE_VENDOR "EchoStore")
set(CPACK_PACKAGE_CONTACT "EchoStore maintainers <maintainers@echostore.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "keeps an in-process cache (L1) coherent with a Valkey/Redis server (L2)")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
if(BUILD_SHARED_LIBS)
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "libhiredis0.14, liburing2, libsqlite3-0, libssl3")
else()
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "libhiredis-dev, liburing-dev, libsqlite3-dev, libssl-dev")
endif()
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "redis-server")
include(CPack)
