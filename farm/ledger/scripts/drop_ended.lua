-- Ended jobs out of the live set (LedgerBase.live_job_ids).
-- KEYS: 1 live jobs zset, 2.. job hashes; ARGV: the jobs' ids, in KEYS' order. Each job leaves
-- the live set only if it has still ended (or is gone): a retry may have reopened it since it
-- was read. Returns how many left.
local ENDED = {{ ENDED }}
local dropped = 0
for i = 2, #KEYS do
  local state = redis.call('HGET', KEYS[i], 'state')
  if not state or ENDED[state] then
    dropped = dropped + redis.call('ZREM', KEYS[1], ARGV[i - 1])
  end
end
return dropped
