# SPDX-License-Identifier: MIT
# Install and export the CMake package `echostore`; proven by tests/package/.
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
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/echostoreConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/echostoreConfigVersion.cmake
              ${CMAKE_CURRENT_LIST_DIR}/EchoDeps.cmake
        DESTINATION ${echo_cmake_dir})
