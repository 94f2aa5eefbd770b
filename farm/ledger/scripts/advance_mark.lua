-- The ledger's mark moved on by one (RestoreRecords.advance_mark), counting on from the store's
-- copy where the ledger's count is behind it. Only under the name the caller read: a ledger lost
-- between the read and this call (its mark gone, or another's) is not marked over, so the next
-- pass still sees the loss.
-- KEYS: 1 the mark hash; ARGV: 1 the name read ('' = none: the caller rebuilt an empty ledger),
-- 2 a new name, for a ledger without one, 3 the store's count ('' = none)
-- Returns {name, count}, or false where the mark changed since it was read.
local name = redis.call('HGET', KEYS[1], 'ledger')
if ARGV[1] ~= '' and name ~= ARGV[1] then return false end
if not name then
  name = ARGV[2]
  redis.call('HSET', KEYS[1], 'ledger', name)
end
local count = tonumber(redis.call('HGET', KEYS[1], 'count') or '0') or 0
if ARGV[3] ~= '' and count < tonumber(ARGV[3]) then count = tonumber(ARGV[3]) end
count = count + 1
redis.call('HSET', KEYS[1], 'count', count)
return {name, count}
