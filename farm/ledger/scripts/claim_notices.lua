-- Due webhook notices claimed (Outbox.claim_notices) by pushing them past `claim until`: a
-- sender that dies leaves them to be claimed again then (at least once); two senders never claim
-- the same one.
-- KEYS: 1 the outbox zset; ARGV: 1 now, 2 claim until, 3 at most. Returns the claimed members.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, member in ipairs(due) do redis.call('ZADD', KEYS[1], 'XX', ARGV[2], member) end
return due
