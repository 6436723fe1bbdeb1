-- SPDX-License-Identifier: MIT
-- retry: hand a failed job back (docs/wire.md, "Scripts"): scheduled again after a delay, or dead
-- once it has used its attempts. The row keeps its group, so promote returns it to its own lane.
-- KEYS[1]  active           emq:{q}:active
-- KEYS[2]  schedule         emq:{q}:schedule
-- KEYS[3]  dead             emq:{q}:dead (zset, score 0)
-- KEYS[4]  the job hash     emq:{q}:job:<id>
-- ARGV[1]  id
-- ARGV[2]  token, the attempts value the holder's claim returned, in decimal
-- ARGV[3]  delay_ms before the job is due again (server time)
-- ARGV[4]  max attempts
-- ARGV[5]  error text, kept in the row's last_error
-- ARGV[6]  base             emq:{q}: (lane, pending, ring, paused, glimit, gactive, wake and
--                           metrics keys are built from it; all share the queue's hash tag)
-- returns  "dead" when attempts >= max, else "scheduled";
--          error EMQSTALE job gone (no row) or EMQSTALE retry token mismatch (host: error stale).
--          error EMQARG when base is not the prefix of KEYS[1], delay_ms is not an integer >= 0,
--          max is not a positive integer or the error text is missing (all checked first: nothing
--          written).
-- Unlike complete, a missing row is an error here: a retry for a job that no longer exists is
-- always a superseded holder's, never a success.
-- #include base_of
-- #include whole
-- #include release
local id, base = ARGV[1], ARGV[6]
local delay, max = whole(ARGV[3], 0), whole(ARGV[4], 1)
if not delay then
  return redis.error_reply('EMQARG delay_ms must be an integer >= 0')
end
if not max then
  return redis.error_reply('EMQARG max attempts must be a positive integer')
end
if type(ARGV[5]) ~= 'string' then
  return redis.error_reply('EMQARG the error text is missing')
end
if not base_of(base, KEYS[1]) then
  return redis.error_reply('EMQARG base must prefix the active key')
end
local job = KEYS[4]
local attempts = redis.call('HGET', job, 'attempts')
if not attempts then
  return redis.error_reply('EMQSTALE job gone')
end
if attempts ~= ARGV[2] then
  return redis.error_reply('EMQSTALE retry token mismatch')
end
-- The same group and active bookkeeping as complete (lib/release.lua).
local g = redis.call('HGET', job, 'group')
release(base, id, g, redis.call('ZREM', KEYS[1], id))
redis.call('HSET', job, 'last_error', ARGV[5])
if tonumber(attempts) >= max then
  redis.call('HSET', job, 'state', 'dead')
  redis.call('ZADD', KEYS[3], 0, id)
  redis.call('HINCRBY', base .. 'metrics:failed', 'count', 1)
  return 'dead'
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', job, 'state', 'scheduled')
redis.call('ZADD', KEYS[2], now_ms + delay, id)
return 'scheduled'
