// SPDX-License-Identifier: MIT
// table::Expected's checked accessors: value(), *, -> on an error and error() on a value throw
// BadExpectedAccess in every build, with the error's message where it has one.
#include <gtest/gtest.h>

#include <string>
#include <system_error>

#include <echo/engine/errc.h>
#include <echo/table/branded_id.h>
#include <echo/table/expected.h>

namespace echo {
namespace {

using engine::Errc;
using table::BadExpectedAccess;
using table::Expected;
using table::Unexpected;

std::string what_of_value(const auto& e) {
  try {
    (void)e.value();
  } catch (const BadExpectedAccess& x) {
    return x.what();
  }
  return "(no throw)";
}

// Fails before the check: in a release build (NDEBUG, as this tree's RelWithDebInfo) value() on
// an error read the empty optional and threw nothing.
TEST(Expected, ValueOnAnErrorThrowsWithTheErrorsMessage) {
  const Expected<int, std::error_code> ec = Unexpected{make_error_code(Errc::kKind)};
  EXPECT_THROW((void)ec.value(), BadExpectedAccess);
  EXPECT_THROW((void)*ec, BadExpectedAccess);
  using IntOrCode = Expected<int, std::error_code>;
  EXPECT_THROW((void)IntOrCode(ec).value(), BadExpectedAccess);
  EXPECT_EQ(what_of_value(ec), "Expected::value() on an error: kind");

  // The table's own error enums say what they are through their to_string.
  const auto bad = table::BrandedId::parse("short");
  ASSERT_FALSE(bad);
  EXPECT_EQ(what_of_value(bad),
            "Expected::value() on an error: " + std::string(table::to_string(bad.error())));
  // A logic_error: what a caller who catches the standard hierarchy sees.
  EXPECT_THROW((void)bad.value(), std::logic_error);
}

TEST(Expected, ErrorOnAValueThrows) {
  const Expected<int, std::error_code> v = 7;
  EXPECT_EQ(v.value(), 7);
  EXPECT_EQ(*v, 7);
  try {
    (void)v.error();
    ADD_FAILURE() << "error() on a value did not throw";
  } catch (const BadExpectedAccess& x) {
    EXPECT_STREQ(x.what(), "Expected::error() on a value");
  }
}

}  // namespace
}  // namespace echo
