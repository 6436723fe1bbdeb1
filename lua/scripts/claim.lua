-- SPDX-License-Identifier: MIT
-- claim: lease the oldest job of the flat queue (docs/wire.md, "Scripts"). The host first sends
-- `HGET emq:{q}:meta paused` and answers empty without calling this while the queue is paused.
-- KEYS[1]  pending          emq:{q}:pending
-- KEYS[2]  active           emq:{q}:active (zset, score = lease deadline ms, server time)
-- ARGV[1]  the job key prefix emq:{q}:job:
-- ARGV[2]  lease_ms
-- returns  {id, payload, attempts} (attempts an integer: the fencing token), or {} when empty;
--          error EMQARG when lease_ms is not a positive integer or the prefix is missing (both
--          checked first: nothing written).
-- The fencing token is `attempts`, and only claims increment it: every claim, first or after a
-- reap or a retry, hands out a token larger than any earlier holder's, so complete/retry with an
-- older token are refused. The lease deadline is the server's clock, the clock reap compares.
-- #include whole
local lease = whole(ARGV[2], 1)
if not lease then
  return redis.error_reply('EMQARG lease_ms must be a positive integer')
end
if type(ARGV[1]) ~= 'string' or #ARGV[1] == 0 then
  return redis.error_reply('EMQARG the job key prefix is missing')
end
local popped = redis.call('ZPOPMIN', KEYS[1])
if #popped == 0 then
  return {}
end
local id = popped[1]
local job = ARGV[1] .. id
local att = redis.call('HINCRBY', job, 'attempts', 1)
redis.call('HSET', job, 'state', 'active')
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[2], now_ms + lease, id)
return {id, redis.call('HGET', job, 'payload'), att}
