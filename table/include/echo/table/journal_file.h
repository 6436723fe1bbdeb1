// SPDX-License-Identifier: MIT
// The journal's file name (docs/wire.md, "The journal"): apart from names.h, so that the headers
// every program includes do not pull in <filesystem>.
#pragma once

#include <filesystem>
#include <string_view>

#include <echo/table/names.h>

namespace echo::table {

// <dir>/journal-<group>.db; the group must be a valid branded id.
Expected<std::filesystem::path, NameError> journal_file(const std::filesystem::path& dir,
                                                        std::string_view group);

}  // namespace echo::table
