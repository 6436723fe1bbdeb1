// SPDX-License-Identifier: MIT
// The server-side Lua scripts (lua/scripts/*.lua), embedded into the library at build time.
// Each carries the lowercase hex SHA1 of its source, which is what EVALSHA sends (docs/wire.md,
// "The connector").
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

namespace echo::lua {

struct Script {
  std::string_view name;    // file name without ".lua", e.g. "drop_l2"
  std::string_view source;  // the exact bytes SCRIPT LOAD sends
  std::string_view sha1;    // 40 lowercase hex digits of SHA1(source)
};

// Every embedded script, sorted by name. Any thread; no allocation.
std::span<const Script> all_scripts() noexcept;

// The script called `name`, or nullptr. Any thread; no allocation.
const Script* find_script(std::string_view name) noexcept;

}  // namespace echo::lua
