-- SPDX-License-Identifier: MIT
-- drop_l2: the conditional L2 drop (docs/wire.md, "L2 values"). Deletes the framed L2 row only
-- when the incoming version is newer than the stored one, so a late stale invalidation can never
-- erase a newer row.
-- KEYS[1]  the L2 key  ecc:{t}:<id>; its value is version(14) .. value bytes
-- KEYS[2]  optional (Engine::remove): the row's removal tombstone ecc:rm:{t}:<id> (docs/wire.md,
--          "Removals"), set to v (newer-only) for ARGV[2] ms whatever the row held
-- ARGV[1]  v, the incoming 14-byte branded version
-- ARGV[2]  with KEYS[2]: the tombstone's ttl in ms (PX), a positive decimal
-- returns  1 when the row was deleted (stored frame shorter than 14 bytes, or v newer),
--          0 when the key is missing or the stored version is equal or newer (kept).
-- Payload bytes 4..14 compare in byte order (payload_newer), never by the server's collation.
-- #include payload_newer
-- #include removed_since
if string.len(ARGV[1]) < 14 then
  return redis.error_reply('EMQARG version shorter than 14 bytes')
end
if KEYS[2] and not removed_since(KEYS[2], ARGV[1]) then
  redis.call('SET', KEYS[2], string.sub(ARGV[1], 1, 14), 'PX', ARGV[2])
end
local stored = redis.call('GET', KEYS[1])
if not stored then
  return 0
end
if string.len(stored) < 14 then
  redis.call('DEL', KEYS[1])
  return 1
end
if payload_newer(ARGV[1], stored) then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
