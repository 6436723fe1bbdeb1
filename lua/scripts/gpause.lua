-- SPDX-License-Identifier: MIT
-- gpause: stop serving one group (docs/wire.md, "Scripts", lane admin). Its backlog stays in the
-- lane and its in-flight jobs run on; it only leaves the ring, and no insert puts it back while
-- it is paused.
-- KEYS[1]  paused           emq:{q}:paused
-- KEYS[2]  ring             emq:{q}:ring
-- ARGV[1]  g, the group
-- returns  1; error EMQARG when g is missing (nothing written).
-- On a member queue (member_enqueue.lua) the member's hand-off credits go too: a claim of g would
-- now be illegal, and a credit vouches that none is (member_park.lua). The credits key is the
-- queue's base, KEYS[1] less its "paused", .. "parked" (same hash tag); elsewhere it is absent.
if type(ARGV[1]) ~= 'string' or #ARGV[1] == 0 then
  return redis.error_reply('EMQARG the group is missing')
end
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('LREM', KEYS[2], 0, ARGV[1])
redis.call('DEL', string.sub(KEYS[1], 1, -7) .. 'parked')
return 1
