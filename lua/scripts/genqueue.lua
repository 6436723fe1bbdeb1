-- SPDX-License-Identifier: MIT
-- genqueue: admit a job into its group's lane (docs/wire.md, "Scripts"), at most once per job id,
-- and make the group servable (ring insert with wake, docs/wire.md, "Keys of a queue").
-- KEYS[1]  the job hash     emq:{q}:job:<id>
-- KEYS[2]  the lane         emq:{q}:g:<g>:pending (zset, every score 0)
-- KEYS[3]  ring             emq:{q}:ring (list of servable groups, each at most once)
-- KEYS[4]  paused           emq:{q}:paused (set of paused groups)
-- KEYS[5]  glimit           emq:{q}:glimit (hash group -> ceiling)
-- KEYS[6]  gactive          emq:{q}:gactive (hash group -> in-flight count)
-- KEYS[7]  wake             emq:{q}:wake (list of "1" tokens, at most 64)
-- ARGV[1]  id, a 14-byte branded id in namespace JOB
-- ARGV[2]  payload (opaque bytes)
-- ARGV[3]  g, the group: a valid branded id (the host checks it)
-- returns  1 enqueued; 0 duplicate (row exists: nothing written, no wake);
--          error EMQKIND when the id is not JOB-namespaced, error EMQARG when the payload or the
--          group is missing (both checked first: nothing written).
if string.sub(ARGV[1], 1, 3) ~= 'JOB' then
  return redis.error_reply('EMQKIND job id must be JOB-namespaced')
end
local id, g = ARGV[1], ARGV[3]
if type(ARGV[2]) ~= 'string' or type(g) ~= 'string' or #g == 0 then
  return redis.error_reply('EMQARG the payload or the group is missing')
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'pending', 'attempts', '0', 'payload', ARGV[2], 'group', g)
redis.call('ZADD', KEYS[2], 0, id)
-- Ring insert with wake. The ring holds each servable group once, so round robin is per group,
-- not per job: a busy lane cannot starve a quiet one. A paused group, or one at its in-flight
-- ceiling, stays out; whoever lifts that condition (gresume, glimit, complete, retry, reap)
-- re-inserts it. The wake token is pushed only when the group *enters* the ring: a consumer
-- parks only after gclaim answered empty, so servable work appears for it exactly when a group
-- enters; a job joining a lane already in the ring needs no token, because whoever drains the
-- ring will reach it. One token per entry, trimmed to 64, bounds the list (an extra token costs a
-- consumer one empty claim). Queue resume (HDEL meta paused) pushes none: a consumer parked on a
-- paused queue finds the work at its next beat.
if redis.call('SISMEMBER', KEYS[4], g) == 1 then
  return 1
end
local limit = redis.call('HGET', KEYS[5], g)
if limit and tonumber(redis.call('HGET', KEYS[6], g) or '0') >= tonumber(limit) then
  return 1
end
if not redis.call('LPOS', KEYS[3], g) then
  redis.call('RPUSH', KEYS[3], g)
  -- On a member queue a lane with work entering the ring takes the hand-off credits down
  -- (member_park.lua); the key is the base, KEYS[3] less its "ring", .. "parked".
  redis.call('DEL', string.sub(KEYS[3], 1, -5) .. 'parked')
  redis.call('LPUSH', KEYS[7], '1')
  redis.call('LTRIM', KEYS[7], 0, 63)
end
return 1
