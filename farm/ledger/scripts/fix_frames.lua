-- Frames of a done job fixed in place (JobRecords.fix_frames, `farm retry --frames`): the job
-- back to running, the chunks holding the frames queued again with a fresh budget, the frames'
-- records dropped (their chunks render them again, reusing the rest), the job's early upload
-- (completed into the video now kept as a version) and every chunk's part in it forgotten.
-- KEYS: 1 job hash, 2 frames hash, 3 job events list, 4 live jobs zset, 5.. every chunk hash
-- ARGV: 1 the job's state (done), 2 its target (running), 3 a chunk's done state, 4 its target
--       (queued), 5 now, 6 the event's JSON, 7 early part field, 8 early upload field,
--       9 JSON list of frames, 10 JSON list of the chunks to remake (their KEYS offsets from 5),
--       11 JSON fields for the job, 12 the job's id
-- Returns 1 when it moved, 0 when the job or a chunk is no longer as the caller read it.
if redis.call('HGET', KEYS[1], 'state') ~= ARGV[1] then return 0 end
local remake = cjson.decode(ARGV[10])
for _, at in ipairs(remake) do
  if redis.call('HGET', KEYS[5 + at], 'state') ~= ARGV[3] then return 0 end
end
for _, at in ipairs(remake) do
  redis.call('HSET', KEYS[5 + at], 'state', ARGV[4], 'failures', 0, 'lost_leases', 0,
    'interruptions', 0, 'transients', 0, 'error', '', 'finished', '', 'updated', ARGV[5])
end
for i = 5, #KEYS do redis.call('HDEL', KEYS[i], ARGV[7]) end
for _, frame in ipairs(cjson.decode(ARGV[9])) do redis.call('HDEL', KEYS[2], tostring(frame)) end
redis.call('HINCRBY', KEYS[1], 'chunks_done', -#remake)
redis.call('HDEL', KEYS[1], ARGV[8])
for k, v in pairs(cjson.decode(ARGV[11])) do redis.call('HSET', KEYS[1], k, tostring(v)) end
redis.call('HSET', KEYS[1], 'state', ARGV[2])
redis.call('ZADD', KEYS[4], ARGV[5], ARGV[12])
if redis.call('RPUSH', KEYS[3], ARGV[6]) > 5000 then redis.call('LTRIM', KEYS[3], -5000, -1) end
return 1
