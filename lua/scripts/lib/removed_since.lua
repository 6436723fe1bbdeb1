-- SPDX-License-Identifier: MIT
-- removed_since(key, framed): true when the removal tombstone `key` (ecc:rm:{t}:<id>, docs/wire.md,
-- "Removals"; nil when the caller names none) holds a version as new as the framed value's or
-- newer: the row was removed at or after that version, and the write must not bring it back.
-- Needs payload_newer.
local function removed_since(key, framed)
  if not key then
    return false
  end
  local removed = redis.call('GET', key)
  return removed ~= false and string.len(removed) >= 14 and not payload_newer(framed, removed)
end
