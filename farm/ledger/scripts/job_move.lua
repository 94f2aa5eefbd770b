-- A whole job's move (JobRecords.move_job).
-- KEYS: 1 job hash, 2 leases zset; ARGV: 1 target, 2 allowed sources csv, 3 JSON fields, 4 now,
-- 5 the job's id. Returns {status, previous state}; status: ok | same | refused | missing.
-- A job leaving 'paused' adds the pause to its paused_s (what the ETA leaves out of the time it
-- has run), unless one of its chunks still holds a lease: none starts during a pause, so that
-- chunk ran all through it and the job never stood still.
{{ include pause }}
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {'missing', ''} end
if state == ARGV[1] then return {'same', state} end
local allowed = false
for s in string.gmatch(ARGV[2], '[^,]+') do if s == state then allowed = true end end
if not allowed then return {'refused', state} end
local function running()  -- a chunk of this job holds a live lease (only a pause's end asks)
  local prefix = ARGV[5] .. ':'
  -- Not an expired one: its worker is gone (the reconciler takes it back), its chunk stood still.
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], ARGV[4], '+inf')) do
    if string.sub(member, 1, #prefix) == prefix then return true end
  end
  return false
end
if state == 'paused' and not running() then end_pause(KEYS[1], ARGV[4]) end
for k, v in pairs(cjson.decode(ARGV[3])) do redis.call('HSET', KEYS[1], k, tostring(v)) end
redis.call('HSET', KEYS[1], 'state', ARGV[1])
return {'ok', state}
