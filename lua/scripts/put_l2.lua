-- SPDX-License-Identifier: MIT
-- put_l2: the conditional L2 write (the fill guard's L2 half). Stores the framed value only when
-- its version is newer than the stored row's, so a slow fill that read an old version can never
-- overwrite a newer row another writer already placed.
-- KEYS[1]  the L2 key  ecc:{t}:<id>
-- KEYS[2]  optional: the row's removal tombstone  ecc:rm:{t}:<id> (docs/wire.md, "Removals"):
--          a version at least as new there refuses the write too, so a loader that read its
--          source before a remove() cannot bring the removed row back
-- ARGV[1]  the framed value: version(14) .. value bytes (at least 14 bytes)
-- ARGV[2]  ttl in ms (PX), a positive decimal
-- returns  1 when stored (no row, a corrupt row shorter than 14 bytes, or an older version),
--          0 when the stored version or the removal's is equal or newer (nothing written).
-- #include payload_newer
-- #include removed_since
local incoming = ARGV[1]
if string.len(incoming) < 14 then
  return redis.error_reply('EMQFRAME framed value shorter than 14 bytes')
end
local stored = redis.call('GET', KEYS[1])
if stored and string.len(stored) >= 14 and not payload_newer(incoming, stored) then
  return 0
end
if removed_since(KEYS[2], incoming) then
  return 0
end
redis.call('SET', KEYS[1], incoming, 'PX', ARGV[2])
return 1
