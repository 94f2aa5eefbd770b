-- A rendering chunk split in two (SplitRecords.split_chunk).
-- KEYS: 1 the running chunk's hash, 2 job hash, 3 the new chunk's hash (index = chunks_total)
-- ARGV: 1 the owner's token, 2 last frame the owner keeps (N), 3 expected chunks_total, 4 now,
--       5 fewest frames the new chunk may take
-- No idle tail: a rendering chunk keeps its frames <= N and a new queued chunk takes the rest,
-- with chunks_total grown in the same step, so the completion gate counts it. Only while the
-- chunk still renders under the same attempt, beyond the frame its owner is on, never while the
-- plan is pending. Returns {1, new index, kept, moved, owner} or {0, why}.
if redis.call('HGET', KEYS[2], 'state') ~= 'running' then return {0, 'job not running'} end
if redis.call('HGET', KEYS[2], 'plan_pending') == '1' then return {0, 'plan pending'} end
local total = tonumber(redis.call('HGET', KEYS[2], 'chunks_total'))
if total ~= tonumber(ARGV[3]) then return {0, 'chunks changed'} end
if redis.call('EXISTS', KEYS[3]) == 1 then return {0, 'chunks changed'} end
if redis.call('HGET', KEYS[1], 'state') ~= 'rendering' then return {0, 'not rendering'} end
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return {0, 'another attempt'} end
local last = tonumber(ARGV[2])
local on = tonumber(redis.call('HGET', KEYS[1], 'frame_on') or '')
if on and last < on then return {0, 'owner past the split'} end
local keep, rest = {}, {}
for _, f in ipairs(cjson.decode(redis.call('HGET', KEYS[1], 'frames'))) do
  if f <= last then keep[#keep + 1] = f else rest[#rest + 1] = f end
end
if #keep == 0 or #rest < tonumber(ARGV[5]) then return {0, 'too few frames'} end
redis.call('HSET', KEYS[1], 'frames', cjson.encode(keep), 'frame_count', #keep,
  'last_frame', last, 'split_at', ARGV[4])
redis.call('HSET', KEYS[3], 'index', total, 'state', 'queued', 'frames', cjson.encode(rest),
  'frame_count', #rest, 'attempt', 0, 'failures', 0, 'interruptions', 0, 'token', '',
  'worker', '', 'error', '', 'split_from', redis.call('HGET', KEYS[1], 'index'))
redis.call('HSET', KEYS[2], 'chunks_total', total + 1)
redis.call('HINCRBY', KEYS[2], 'splits', 1)
return {1, total, #keep, #rest, redis.call('HGET', KEYS[1], 'worker') or ''}
