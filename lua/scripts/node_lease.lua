-- SPDX-License-Identifier: MIT
-- node_lease: a process's minting node (docs/wire.md, "Node leases"): SET <prefix><n> token NX PX
-- lease for the node asked for, or for the first free node in 0..1023. Every lease key shares
-- the hash tag {ecc}, so on a cluster they live in one slot with KEYS[1].
-- KEYS[1]  the lease prefix  {ecc}:node:
-- ARGV[1]  token             this process's owner token (host:pid:random)
-- ARGV[2]  lease_ms          > 0
-- ARGV[3]  wanted            0..1023 for that node (an explicit node_id), -1 for the first free
-- returns  the node now leased to the token (one already held by it is extended), -1 when no
--          node is free, -2 when the node wanted is leased to another token.
-- #include whole
local token, lease, wanted = ARGV[1], whole(ARGV[2], 1), whole(ARGV[3], -1)
if type(token) ~= 'string' or #token == 0 or not lease or not wanted or wanted > 1023 then
  return redis.error_reply('EMQARG token, lease_ms > 0 and a node in -1..1023 are required')
end
local function take(n)
  local key = KEYS[1] .. n
  if redis.call('SET', key, token, 'NX', 'PX', lease) then
    return true
  end
  if redis.call('GET', key) == token then
    redis.call('PEXPIRE', key, lease)
    return true
  end
  return false
end
if wanted >= 0 then
  return take(wanted) and wanted or -2
end
for n = 0, 1023 do
  if take(n) then
    return n
  end
end
return -1
