-- An expired lease dropped (Ledger.drop_lease with expired_by).
-- KEYS: 1 leases zset; ARGV: 1 the lease's member, 2 now. A lease the reconciler found expired
-- leaves only if it still is: the chunk's next claim may have renewed it since. Returns 1 or 0.
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if expiry and tonumber(expiry) <= tonumber(ARGV[2]) then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0
