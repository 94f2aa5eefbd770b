-- A done chunk made again (JobRecords.remake_chunk, `farm retry`), only while its job has failed
-- or was cancelled: its budget fresh, its part in the early upload forgotten, the job's done
-- count one less, the event recorded.
-- KEYS: 1 chunk hash, 2 job hash, 3 job events list
-- ARGV: 1, 2 the job states it may be in (failed, cancelled), 3 the chunk's state (done),
--       4 target state, 5 now, 6 the event's JSON, 7 the chunk's early part field
-- Returns 1 when it moved, else 0.
local jstate = redis.call('HGET', KEYS[2], 'state')
if jstate ~= ARGV[1] and jstate ~= ARGV[2] then return 0 end
if redis.call('HGET', KEYS[1], 'state') ~= ARGV[3] then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[4], 'failures', 0, 'lost_leases', 0,
  'interruptions', 0, 'transients', 0, 'error', '', 'finished', '', 'updated', ARGV[5])
redis.call('HDEL', KEYS[1], ARGV[7])  -- its part in the early upload is no longer right
redis.call('HINCRBY', KEYS[2], 'chunks_done', -1)
if redis.call('RPUSH', KEYS[3], ARGV[6]) > 5000 then redis.call('LTRIM', KEYS[3], -5000, -1) end
return 1
