// SPDX-License-Identifier: MIT
// The journal unit tests' fixture (journal_test.cc, journal_commit_test.cc,
// journal_faults_test.cc): a journal's options under a fresh directory, and a plain SQLite query
// of its file.
#pragma once

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <string>
#include <string_view>

#include <echo/engine/journal.h>
#include <echo/table/branded_id.h>

#include "support/temp_dir.h"

namespace echo::engine {

using table::BrandedId;

inline BrandedId id(std::string_view ns, std::uint64_t s) {
  return BrandedId::encode(ns, s).value();
}

class JournalTest : public ::testing::Test {
 protected:
  JournalOptions options(std::string group = "PRT0KHTOWnGLuC") {
    JournalOptions o;
    o.dir = dir_ / "nested" / "dir";
    o.group = std::move(group);
    return o;
  }
  std::string query(const std::filesystem::path& file, const char* sql) {
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open(file.c_str(), &db), SQLITE_OK);
    std::string out;
    sqlite3_exec(
        db, sql,
        [](void* o, int n, char** v, char**) {
          auto* s = static_cast<std::string*>(o);
          for (int i = 0; i < n; ++i)
            *s += (v[i] ? v[i] : "NULL") + std::string(i + 1 < n ? "|" : "\n");
          return 0;
        },
        &out, nullptr);
    sqlite3_close(db);
    return out;
  }
  test::TempDir temp_{"echostore-journal-"};
  const std::filesystem::path& dir_ = temp_.path();
};

}  // namespace echo::engine
