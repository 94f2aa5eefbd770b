-- A chunk's claim count raised to at least ARGV[1] (RestoreRecords.raise_claims): a ledger rolled
-- back to before claims the store has seen must not hand out their numbers again, or a new
-- attempt would write an old one's names. Never lowers it; a chunk that is gone is left alone.
-- KEYS: 1 chunk hash; ARGV: 1 the least claim count. Returns 1 when raised.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if (tonumber(redis.call('HGET', KEYS[1], 'claims') or '0') or 0) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'claims', ARGV[1])
return 1
