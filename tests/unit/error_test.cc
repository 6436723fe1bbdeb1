// SPDX-License-Identifier: MIT
// engine::Error, the data verbs' error, and Result<T>: the message (the detail, else the code's),
// the comparisons with every code type, the conversion to std::error_code, and value() on an
// error throwing with the message.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <system_error>

#include <echo/engine/error.h>
#include <echo/io/io_error.h>

namespace echo {
namespace {

using engine::Errc;
using engine::Error;
using engine::Result;
using table::BadExpectedAccess;
using table::Unexpected;

TEST(EngineError, ValueOnAnErrorResultThrowsWithTheMessage) {
  const Result<std::string> r = Unexpected{Error{Errc::kLoaderFailed, "loader failed: gone"}};
  EXPECT_THROW((void)r->size(), BadExpectedAccess);
  try {
    (void)r.value();
    ADD_FAILURE() << "value() on an error did not throw";
  } catch (const BadExpectedAccess& x) {
    EXPECT_STREQ(x.what(), "Expected::value() on an error: loader failed: gone");
  }
}

TEST(EngineError, AResultsValueMovesOutAndItsErrorIsMadeFromACode) {
  Result<std::string> r = std::string("px=100.00");
  r.value() += "!";
  EXPECT_EQ(std::move(r).value(), "px=100.00!");
  const Result<int> from_code = Unexpected{make_error_code(io::IoErrc::kDisconnected)};
  ASSERT_FALSE(from_code);
  EXPECT_EQ(from_code.error(), io::IoErrc::kDisconnected);
  EXPECT_TRUE(from_code.error().detail.empty());
}

TEST(EngineError, MessageIsTheDetailWhenSetElseTheCodes) {
  EXPECT_EQ(Error(Errc::kLoaderFailed).message(), "loader_failed");
  EXPECT_EQ(Error(Errc::kLoaderFailed, "loader failed: no row").message(), "loader failed: no row");
  EXPECT_FALSE(Error());
  EXPECT_TRUE(Error(Errc::kTimeout));
  std::ostringstream os;
  os << Error(Errc::kLoaderFailed, "loader failed: no row");
  EXPECT_EQ(os.str(), "echostore:loader_failed (loader failed: no row)");
}

TEST(EngineError, ComparesByCodeWithErrcIoErrcAndErrorCode) {
  const Error e(Errc::kKind, "a detail");
  EXPECT_TRUE(e == Errc::kKind);
  EXPECT_TRUE(Errc::kKind == e);
  EXPECT_FALSE(e == Errc::kTimeout);
  EXPECT_TRUE(e != Errc::kTimeout);
  EXPECT_TRUE(e == make_error_code(Errc::kKind));
  EXPECT_TRUE(make_error_code(Errc::kKind) == e);
  EXPECT_TRUE(e == Error(Errc::kKind));  // the detail is for people
  const Error io_error(io::IoErrc::kDisconnected);
  EXPECT_TRUE(io_error == io::IoErrc::kDisconnected);
  EXPECT_FALSE(io_error == Errc::kKind);
  // Handed on where an error_code is wanted, it is its code.
  const std::error_code ec = e;
  EXPECT_EQ(ec, make_error_code(Errc::kKind));
}

}  // namespace
}  // namespace echo
