-- SPDX-License-Identifier: MIT
-- enqueue: admit a job into a queue's flat pending set (docs/wire.md, "Scripts"), at most once
-- per job id.
-- KEYS[1]  the job hash     emq:{q}:job:<id>
-- KEYS[2]  the flat queue   emq:{q}:pending (zset, every score 0)
-- ARGV[1]  id, a 14-byte branded id in namespace JOB
-- ARGV[2]  payload (opaque bytes)
-- returns  1 enqueued; 0 duplicate (the row exists in any state and is left untouched);
--          error EMQKIND when the id is not JOB-namespaced, error EMQARG when the payload is
--          missing (both checked first: nothing written).
-- Act order is policy -> existence -> write. Dedup is on the row, not on pending: a job that is
-- active, scheduled or dead is still a duplicate, so a replayed enqueue can never reset a job's
-- attempts (its fencing token) or resurrect it. All scores are 0, so pending orders by member
-- bytes = mint order, and ZPOPMIN serves the oldest id first.
if string.sub(ARGV[1], 1, 3) ~= 'JOB' then
  return redis.error_reply('EMQKIND job id must be JOB-namespaced')
end
if type(ARGV[2]) ~= 'string' then
  return redis.error_reply('EMQARG the payload is missing')
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'pending', 'attempts', '0', 'payload', ARGV[2])
redis.call('ZADD', KEYS[2], 0, ARGV[1])
return 1
