-- SPDX-License-Identifier: MIT
-- member_retire: a clean stop takes this process's token out of its member queue's owner key
-- (job_consumer.cc, "Two processes, one node id"), only while the key still holds it. A successor
-- under the same node id then finds no predecessor's token at its first beat and caches at once,
-- where it waited one member ttl (3 s at job_beat_ms 1000) to tell a predecessor from a twin.
-- KEYS[1]  the owner key  emq:{ecc.coh.<t>|<m>}:owner
-- ARGV[1]  token          this process's owner token
-- returns  1 retired, 0 the key held another token (a twin's) or none (nothing written).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
