-- SPDX-License-Identifier: MIT
-- schedule: admit a job that becomes pending later (docs/wire.md, "Scripts"), at most once per job
-- id; promote moves it to its lane or the flat queue when due.
-- KEYS[1]  the job hash     emq:{q}:job:<id>
-- KEYS[2]  schedule         emq:{q}:schedule (zset, score = run-at ms, server time)
-- ARGV[1]  id, a 14-byte branded id in namespace JOB
-- ARGV[2]  payload (opaque bytes)
-- ARGV[3]  "in" (ARGV[4] is a delay from the server's now) or "at" (ARGV[4] is absolute run-at ms)
-- ARGV[4]  n, milliseconds
-- returns  1 scheduled; 0 duplicate (row exists: nothing written);
--          error EMQKIND when the id is not JOB-namespaced, error EMQARG when the mode is neither
--          "in" nor "at", n is not an integer >= 0 or the payload is missing (all checked first:
--          nothing written).
-- "in" is measured on the server's clock (TIME), the same clock promote compares against, so host
-- clock skew cannot make a delayed job run early or late. A mode other than "in" or "at" ("In")
-- is refused, not read as "at": "In 5000" would have run the job at once.
if string.sub(ARGV[1], 1, 3) ~= 'JOB' then
  return redis.error_reply('EMQKIND job id must be JOB-namespaced')
end
-- #include whole
local run_at = whole(ARGV[4], 0)
if ARGV[3] ~= 'in' and ARGV[3] ~= 'at' then
  return redis.error_reply('EMQARG mode must be in or at')
end
if not run_at then
  return redis.error_reply('EMQARG n must be an integer >= 0')
end
if type(ARGV[2]) ~= 'string' then
  return redis.error_reply('EMQARG the payload is missing')
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
if ARGV[3] == 'in' then
  local t = redis.call('TIME')
  run_at = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + run_at
end
redis.call('HSET', KEYS[1], 'state', 'scheduled', 'attempts', '0', 'payload', ARGV[2])
redis.call('ZADD', KEYS[2], run_at, ARGV[1])
return 1
