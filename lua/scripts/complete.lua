-- SPDX-License-Identifier: MIT
-- complete: retire a job its holder finished (docs/wire.md, "Scripts"). Completion deletes the row.
-- KEYS[1]  active           emq:{q}:active
-- KEYS[2]  the job hash     emq:{q}:job:<id>
-- ARGV[1]  id
-- ARGV[2]  token, the attempts value the holder's claim returned, in decimal
-- ARGV[3]  base             emq:{q}: (lane, pending, ring, paused, glimit, gactive, wake and
--                           metrics keys are built from it; all share the queue's hash tag)
-- returns  1 ok; 0 when the row is gone (host: error gone);
--          error EMQSTALE when the token is not the row's attempts (host: error stale);
--          error EMQARG when base is not the prefix of KEYS[1] (checked first: nothing written).
-- The token is compared as a string with the row's attempts ("1" is not "01"). Only a claim moves
-- attempts, so a match proves no one claimed the job after this holder.
-- #include base_of
-- #include finish
if not base_of(ARGV[3], KEYS[1]) then
  return redis.error_reply('EMQARG base must prefix the active key')
end
local verdict = finish(ARGV[3], ARGV[1], KEYS[2], KEYS[1], ARGV[2])
if verdict == -1 then
  return redis.error_reply('EMQSTALE complete token mismatch')
end
return verdict
