-- SPDX-License-Identifier: MIT
-- receipt_ask: publish_and_wait's ask on the broadcast and tracking lanes (docs/wire.md,
-- "Receipts"): how many nodes subscribe the table's ask channel, and the ask sent to them, in one
-- step (no node joins or leaves between the count and the send). The count is the channel's own
-- subscribers (PUBSUB NUMSUB, or SHARDNUMSUB for a sharded channel): a client that matches it
-- with a pattern (PSUBSCRIBE ecc:*, a monitoring tool) hears the ask but never counts itself in
-- the receipt, so it is not counted here, where PUBLISH's own answer would count it.
-- KEYS[1]  the receipt key  ecc:rcpt:{t}:<receipt> (not touched: it names the slot)
-- ARGV[1]  the ask channel  ecc:{t}:ask
-- ARGV[2]  the ask  receipt ":" the write's message
-- ARGV[3]  'PUBLISH', or 'SPUBLISH' on a cluster
-- returns  the number of the channel's subscribers; error EMQARG for another verb (nothing sent)
local verb = ARGV[3]
local count
if verb == 'PUBLISH' then
  count = redis.call('PUBSUB', 'NUMSUB', ARGV[1])[2]
elseif verb == 'SPUBLISH' then
  count = redis.call('PUBSUB', 'SHARDNUMSUB', ARGV[1])[2]
else
  return redis.error_reply('EMQARG verb must be PUBLISH or SPUBLISH')
end
redis.call(verb, ARGV[1], ARGV[2])
return count
