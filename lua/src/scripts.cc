// SPDX-License-Identifier: MIT
// Lookup over the table that cmake/EmbedLua.cmake generates from lua/scripts/*.lua.
#include <echo/lua/scripts.h>

#include <algorithm>

namespace echo::lua {
namespace detail {
extern const Script kScripts[];
extern const std::size_t kScriptCount;
}  // namespace detail

std::span<const Script> all_scripts() noexcept { return {detail::kScripts, detail::kScriptCount}; }

const Script* find_script(std::string_view name) noexcept {
  const auto scripts = all_scripts();
  const auto it = std::find_if(scripts.begin(), scripts.end(),
                               [name](const Script& s) { return s.name == name; });
  return it == scripts.end() ? nullptr : &*it;
}

}  // namespace echo::lua
