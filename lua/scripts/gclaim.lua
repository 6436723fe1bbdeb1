-- SPDX-License-Identifier: MIT
-- gclaim: lease the oldest job of the next group in the ring (docs/wire.md, "Scripts"), round robin
-- over groups. The host first sends `HGET emq:{q}:meta paused` and answers empty without calling
-- this while the queue is paused.
-- KEYS[1]  ring             emq:{q}:ring
-- KEYS[2]  active           emq:{q}:active (zset, score = lease deadline ms, server time)
-- ARGV[1]  base             emq:{q}: (lane, job, gactive and glimit keys are built from it; all
--                           share the queue's hash tag, so the script stays single-slot)
-- ARGV[2]  lease_ms
-- returns  {id, payload, attempts, g} (attempts an integer: the fencing token), or {} when the
--          ring is empty or the rotated group's lane was empty; error EMQARG when base is not
--          the prefix of KEYS[1] or lease_ms is not a positive integer (checked first: nothing
--          written).
-- #include base_of
-- #include whole
-- #include claim_next
local lease = whole(ARGV[2], 1)
if not lease then
  return redis.error_reply('EMQARG lease_ms must be a positive integer')
end
if not base_of(ARGV[1], KEYS[1]) then
  return redis.error_reply('EMQARG base must prefix the ring key')
end
return claim_next(ARGV[1], KEYS[1], KEYS[2], lease) or {}
