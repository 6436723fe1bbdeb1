// SPDX-License-Identifier: MIT
// The version this library was built as (echo/version.h, generated): what a program that loads
// the shared library at run time compares with the headers it was compiled against.
#include <echo/version.h>

namespace echo {

const char* library_version() noexcept { return ECHO_VERSION_STRING; }

}  // namespace echo
