-- SPDX-License-Identifier: MIT
-- publish_l2: Engine::publish on a broadcast-lane table: the L2 write (docs/wire.md, "L2 values")
-- and its coherence message (docs/wire.md, "The coherence message") in one script, so the server
-- runs both or neither. No subscriber hears the message before the row exists (the script runs
-- whole before the server serves anything else, and writes pushes out only after it), and a
-- connection lost mid-call leaves no row without its message: the server either read the whole
-- EVALSHA and ran it, or ran nothing.
-- KEYS[1]  the L2 key  ecc:{t}:<id>
-- KEYS[2]  optional: the row's removal tombstone  ecc:rm:{t}:<id> (docs/wire.md, "Removals"):
--          'remove' writes it (newer-only, PX the TTL), and a SET as old as it or older is not
--          made (the removal stands)
-- ARGV[1]  the framed value: version(14) .. value bytes (at least 14 bytes)
-- ARGV[2]  ttl in ms (PX), a positive decimal (the declared TTL, no jitter)
-- ARGV[3]  the channel ecc:{t}:coh (the key's hash tag: one slot on a cluster)
-- ARGV[4]  the message id:version (29 bytes; the host builds it), or with ARGV[6] the carried
--          message's head "{" key "}"
-- ARGV[6]  optional: 'carry': the message is ARGV[4] .. ARGV[1], "{" key "}" version value
--          (docs/wire.md, "Carried values"), so the value crosses the wire once
--          or 'remove' (Engine::remove): ARGV[1] is the removal's version alone (14 bytes); the
--          row goes unless L2 holds a newer one (drop_l2's rule), KEYS[2] keeps the version for
--          the TTL, and the message ARGV[4] is sent either way: every node drops its older row and
--          remembers the version (a tombstone).
-- ARGV[5]  'PUBLISH', or 'SPUBLISH' on a cluster: redis-server 7.0 lets a script SPUBLISH on a
--          channel of its own slot (and refuses another slot's under `#!lua`)
-- returns  the number of subscribers that heard the message (the verb's reply); error EMQFRAME
--          when ARGV[1] is shorter than 14 bytes, EMQARG when ARGV[5] is neither verb (both
--          checked first: nothing written, nothing sent).
-- The SET is newer-only, as put_l2's: two publishes of one key in flight at once (two threads, two
-- nodes) reach the server in either order, and an older one that runs last must not leave L2
-- behind the newer message every node already applied (a node that dropped its row at the newer
-- version would refuse every fill of the older one: a miss on every read). Its message is sent
-- either way: it is stale wherever it arrives.
-- #include payload_newer
-- #include removed_since
local framed, verb = ARGV[1], ARGV[5]
if string.len(framed) < 14 then
  return redis.error_reply('EMQFRAME framed value shorter than 14 bytes')
end
if verb ~= 'PUBLISH' and verb ~= 'SPUBLISH' then
  return redis.error_reply('EMQARG verb must be PUBLISH or SPUBLISH')
end
local stored = redis.call('GET', KEYS[1])
if ARGV[6] == 'remove' then
  if stored and (string.len(stored) < 14 or payload_newer(framed, stored)) then
    redis.call('DEL', KEYS[1])
  end
  if KEYS[2] and not removed_since(KEYS[2], framed) then
    redis.call('SET', KEYS[2], string.sub(framed, 1, 14), 'PX', ARGV[2])
  end
  return redis.call(verb, ARGV[3], ARGV[4])
end
if not (stored and string.len(stored) >= 14 and not payload_newer(framed, stored)) and
    not removed_since(KEYS[2], framed) then
  redis.call('SET', KEYS[1], framed, 'PX', ARGV[2])
end
if ARGV[6] == 'carry' then
  return redis.call(verb, ARGV[3], ARGV[4] .. framed)
end
return redis.call(verb, ARGV[3], ARGV[4])
