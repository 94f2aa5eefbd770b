-- A lease renewed by the attempt that holds it (Ledger.renew).
-- KEYS: 1 chunk hash, 2 leases zset; ARGV: 1 token, 2 new expiry, 3 member, 4 job hash key
-- Returns 'ok', 'lost' (another attempt owns it) or 'cancelled'. The states that hold a lease
-- come from the pipeline. 'split:N' is 'ok' for a chunk split by split.lua: stop after frame N.
local RUNNING = {{ RUNNING }}
local jstate = redis.call('HGET', ARGV[4], 'state')
if jstate == 'cancelled' or jstate == 'failed' then return 'cancelled' end
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 'lost' end
local state = redis.call('HGET', KEYS[1], 'state')
if not RUNNING[state] then return 'lost' end
redis.call('HSET', KEYS[1], 'lease_expires', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
local last = redis.call('HGET', KEYS[1], 'last_frame')
if last then return 'split:' .. last end
return 'ok'
