-- The rest of an auto-sized job, planned once (JobRecords.plan_rest).
-- KEYS: 1 job hash, 2.. the new chunk hashes (indexes chunks_total, chunks_total+1, ...)
-- ARGV: 1 now, 2 chunk size, 3 reason, 4 JSON list of frame lists, 5 expected chunks_total
-- The chunks and the new total appear together with plan_pending cleared, so the completion gate
-- never sees a partial total. Returns 1 or 0.
if redis.call('HGET', KEYS[1], 'plan_pending') ~= '1' then return 0 end
local total = tonumber(redis.call('HGET', KEYS[1], 'chunks_total'))
if total ~= tonumber(ARGV[5]) then return 0 end
local plan = cjson.decode(ARGV[4])
for i, frames in ipairs(plan) do
  redis.call('HSET', KEYS[i + 1], 'index', total + i - 1, 'state', 'queued',
    'frames', cjson.encode(frames), 'frame_count', #frames, 'attempt', 0, 'failures', 0,
    'interruptions', 0, 'token', '', 'worker', '', 'error', '')
end
redis.call('HSET', KEYS[1], 'chunks_total', total + #plan, 'plan_pending', '0',
  'chunk_size', ARGV[2], 'chunk_plan', ARGV[3], 'planned', ARGV[1])
return 1
