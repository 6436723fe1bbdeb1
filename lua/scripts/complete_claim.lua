-- SPDX-License-Identifier: MIT
-- complete_claim: retire the job its holder finished and lease the next one, in one round trip on
-- one queue (issue 6 item 5: the job lane's latency is its hop count). It is complete.lua then
-- gclaim.lua, verbatim in effect; it works on the shared queue and on a member queue alike.
-- KEYS[1]  active           <base>active (zset, score = lease deadline ms, server time)
-- KEYS[2]  the job hash     <base>job:<id> of the job to complete
-- KEYS[3]  ring             <base>ring
-- ARGV[1]  id of the job to complete
-- ARGV[2]  token, the attempts value the holder's claim returned, in decimal
-- ARGV[3]  base             emq:{q}: or a member queue emq:{q}:m:<m>: (lane, pending, job,
--                           paused, glimit, gactive, wake, meta and metrics keys are built from it;
--                           all share the queue's hash tag)
-- ARGV[4]  lease_ms of the next claim
-- returns  {verdict, id, payload, attempts, g} when a job was claimed, else {verdict}; verdict is
--          the completion's: 1 ok, 0 gone (row missing), -1 stale (token is not the row's
--          attempts: nothing completed). attempts is an integer, the next job's fencing token.
-- Unlike complete, a stale token is not an error reply: the claim still runs, so a holder whose
-- lease was overtaken keeps its consumer fed. A gone or stale completion writes nothing.
-- The claim half is gclaim's, plus the host's check that precedes it: while the queue is paused
-- (meta paused) nothing is claimed and the answer is {verdict}. Like gclaim, it answers {verdict}
-- when the rotated group's lane was empty even if other lanes hold work (the consumer then runs
-- gclaim or parks, as after an empty gclaim).
local id, token, base = ARGV[1], ARGV[2], ARGV[3]

-- complete.lua (WIRE §5.3), returning 1, 0 or -1.
local function complete()
  local attempts = redis.call('HGET', KEYS[2], 'attempts')
  if not attempts then
    return 0
  end
  if attempts ~= token then
    return -1
  end
  local g = redis.call('HGET', KEYS[2], 'group')
  local was = redis.call('ZREM', KEYS[1], id)
  if g then
    local lane = base .. 'g:' .. g .. ':pending'
    local ring = KEYS[3]
    if was == 1 then
      -- The holder's slot frees up; a group with work re-enters the ring (with a wake) if it is
      -- unpaused and under its ceiling by the decremented count.
      local act = redis.call('HINCRBY', base .. 'gactive', g, -1)
      if act <= 0 then
        redis.call('HDEL', base .. 'gactive', g)
      end
      if redis.call('SISMEMBER', base .. 'paused', g) == 0 and redis.call('ZCARD', lane) > 0 then
        local limit = redis.call('HGET', base .. 'glimit', g)
        if (not limit or act < tonumber(limit)) and not redis.call('LPOS', ring, g) then
          redis.call('RPUSH', ring, g)
          local wake = base .. 'wake'
          redis.call('LPUSH', wake, '1')
          redis.call('LTRIM', wake, 0, 63)
        end
      end
    else
      -- Reaped back into its lane and not re-claimed since: the work is done, retire it there.
      redis.call('ZREM', lane, id)
      if redis.call('ZCARD', lane) == 0 then
        redis.call('LREM', ring, 0, g)
      end
    end
  elseif was == 0 then
    redis.call('ZREM', base .. 'pending', id)
  end
  redis.call('DEL', KEYS[2])
  redis.call('HINCRBY', base .. 'metrics:completed', 'count', 1)
  return 1
end

local verdict = complete()
if redis.call('HGET', base .. 'meta', 'paused') then
  return {verdict}
end

-- gclaim.lua (WIRE §5.3): rotate, pop the rotated lane's oldest, lease it.
local g = redis.call('LMOVE', KEYS[3], KEYS[3], 'LEFT', 'RIGHT')
if not g then
  return {verdict}
end
local lane = base .. 'g:' .. g .. ':pending'
local popped = redis.call('ZPOPMIN', lane)
if #popped == 0 then
  redis.call('LREM', KEYS[3], 0, g)
  return {verdict}
end
local next_id = popped[1]
local job = base .. 'job:' .. next_id
local att = redis.call('HINCRBY', job, 'attempts', 1)
redis.call('HSET', job, 'state', 'active')
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[4]), next_id)
local act = redis.call('HINCRBY', base .. 'gactive', g, 1)
local limit = redis.call('HGET', base .. 'glimit', g)
if (limit and act >= tonumber(limit)) or redis.call('ZCARD', lane) == 0 then
  redis.call('LREM', KEYS[3], 0, g)
end
return {verdict, next_id, redis.call('HGET', job, 'payload'), att, g}
