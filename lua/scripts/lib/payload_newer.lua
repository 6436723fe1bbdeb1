-- SPDX-License-Identifier: MIT
-- payload_newer(a, b): true when version a is newer than version b (docs/wire.md, "Branded ids"):
-- their payload bytes (Lua 1-based 4..14) compared as unsigned bytes, a higher first difference
-- wins, equal is not newer. Never Lua's string `<`/`>`: those call strcoll, and redis-server sets
-- LC_COLLATE from its environment, so under en_US.UTF-8 "...GLua" sorts before "...GLuB" (case
-- folded first) and a newer version would pass for an older one. Both arguments hold at least 14
-- bytes.
local function payload_newer(a, b)
  for i = 4, 14 do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x > y
    end
  end
  return false
end
