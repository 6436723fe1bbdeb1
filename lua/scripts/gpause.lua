-- SPDX-License-Identifier: MIT
-- gpause: stop serving one group (WIRE §5.3, lane admin). Its backlog stays in the lane and its
-- in-flight jobs run on; it only leaves the ring, and no insert puts it back while it is paused.
-- KEYS[1]  paused           emq:{q}:paused
-- KEYS[2]  ring             emq:{q}:ring
-- ARGV[1]  g, the group
-- returns  1.
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('LREM', KEYS[2], 0, ARGV[1])
return 1
