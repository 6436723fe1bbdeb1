// SPDX-License-Identifier: MIT
// The out-of-line throw of Expected's checked accessors (expected.h): kept here so the inline
// accessors carry one branch and a call, not the string building of the message.
#include <echo/table/expected.h>

namespace echo::table::detail {

void throw_bad_expected_access(const char* what, std::string_view detail) {
  std::string message(what);
  if (!detail.empty()) {
    message += ": ";
    message += detail;
  }
  throw BadExpectedAccess(message);
}

}  // namespace echo::table::detail
