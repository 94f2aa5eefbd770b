"""The ledger's atomic transitions, as Redis Lua scripts (one round trip, no races)."""

from __future__ import annotations

# KEYS: 1 chunk hash, 2 job hash, 3 leases zset
# ARGV: 1 target, 2 allowed sources (csv), 3 token ('' = any), 4 lease member,
#       5 lease expiry ('' = drop lease), 6 JSON fields to set, 7 mode, 8 new token suffix,
#       9 now, 10 max failures
# Returns {status, previous_state, token_or_state}; status: ok | same | refused | stale | missing
CHUNK_MOVE = r"""
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {'missing', '', ''} end
local jstate = redis.call('HGET', KEYS[2], 'state')
local target = ARGV[1]
local mode = ARGV[7]
if state == target and mode ~= 'claim' then return {'same', state, ''} end
local allowed = false
for s in string.gmatch(ARGV[2], '[^,]+') do if s == state then allowed = true end end
if not allowed then return {'refused', state, jstate} end
if ARGV[3] ~= '' and redis.call('HGET', KEYS[1], 'token') ~= ARGV[3] then
  return {'stale', state, ''}
end
if mode == 'expire' and tonumber(redis.call('HGET', KEYS[1], 'lease_expires') or '0') > tonumber(ARGV[9]) then
  return {'refused', state, 'renewed'}  -- renewed since the reconciler looked: not expired
end
local token = redis.call('HGET', KEYS[1], 'token') or ''
if mode == 'claim' then
  if jstate ~= 'queued' and jstate ~= 'running' then return {'refused', state, jstate} end
  local attempt = redis.call('HINCRBY', KEYS[1], 'attempt', 1)
  token = tostring(attempt) .. ':' .. ARGV[8]
  redis.call('HSET', KEYS[1], 'token', token)
  if jstate == 'queued' then redis.call('HSET', KEYS[2], 'state', 'running', 'started', ARGV[9]) end
  if not redis.call('HGET', KEYS[1], 'started') then redis.call('HSET', KEYS[1], 'started', ARGV[9]) end
elseif mode == 'fail' or mode == 'expire' then
  -- A failure spends the chunk's budget; a lost lease (a worker that vanished) spends a
  -- separate, larger one, so reclaimed spot instances do not fail jobs but a chunk that kills
  -- every worker it lands on still ends.
  local counter = (mode == 'fail') and 'failures' or 'lost_leases'
  local failures = redis.call('HINCRBY', KEYS[1], counter, 1)
  if failures >= tonumber(ARGV[10]) then
    target = 'failed'
    if jstate ~= 'done' and jstate ~= 'failed' and jstate ~= 'cancelled' then
      local fields = cjson.decode(ARGV[6])
      local what = (mode == 'fail') and ' failed ' or ' lost its worker '
      redis.call('HSET', KEYS[2], 'state', 'failed', 'finished', ARGV[9],
        'error', 'chunk ' .. redis.call('HGET', KEYS[1], 'index') .. what ..
        tostring(failures) .. ' times: ' .. (fields['error'] or 'unknown error'))
    end
  end
elseif mode == 'interrupt' then
  -- Interruptions spend no failure, but a chunk interrupted without end is still stopped.
  local interruptions = redis.call('HINCRBY', KEYS[1], 'interruptions', 1)
  if tonumber(ARGV[10]) > 0 and interruptions >= 3 * tonumber(ARGV[10]) then
    target = 'failed'
    if jstate ~= 'done' and jstate ~= 'failed' and jstate ~= 'cancelled' then
      redis.call('HSET', KEYS[2], 'state', 'failed', 'finished', ARGV[9], 'error',
        'chunk ' .. redis.call('HGET', KEYS[1], 'index') .. ' was interrupted ' ..
        tostring(interruptions) .. ' times')
    end
  end
end
local fields = cjson.decode(ARGV[6])
for k, v in pairs(fields) do redis.call('HSET', KEYS[1], k, tostring(v)) end
redis.call('HSET', KEYS[1], 'state', target, 'updated', ARGV[9])
if ARGV[5] ~= '' then
  redis.call('ZADD', KEYS[3], ARGV[5], ARGV[4])
else
  redis.call('ZREM', KEYS[3], ARGV[4])
end
if target == 'done' then
  redis.call('HINCRBY', KEYS[2], 'chunks_done', 1)
  redis.call('HSET', KEYS[1], 'finished', ARGV[9])
end
return {'ok', state, token, target}
"""

# KEYS: 1 chunk hash, 2 leases zset; ARGV: 1 token, 2 new expiry, 3 member, 4 job hash key
# Returns 'ok', 'lost' (another attempt owns it) or 'cancelled'.
RENEW = r"""
local jstate = redis.call('HGET', ARGV[4], 'state')
if jstate == 'cancelled' or jstate == 'failed' then return 'cancelled' end
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 'lost' end
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'rendering' and state ~= 'encoding' then return 'lost' end
redis.call('HSET', KEYS[1], 'lease_expires', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
return 'ok'
"""

# KEYS: 1 job hash; ARGV: 1 now. The completion gate: exactly one caller wins 'stitching'.
# Never while an auto-sized job's plan is pending: chunks_total does not count the rest yet.
START_STITCH = r"""
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'running' then return 0 end
if redis.call('HGET', KEYS[1], 'plan_pending') == '1' then return 0 end
if tonumber(redis.call('HGET', KEYS[1], 'chunks_done')) ~=
   tonumber(redis.call('HGET', KEYS[1], 'chunks_total')) then return 0 end
redis.call('HSET', KEYS[1], 'state', 'stitching', 'stitch_started', ARGV[1])
return 1
"""

# KEYS: 1 job hash; ARGV: 1 target, 2 allowed sources csv, 3 JSON fields
JOB_MOVE = r"""
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {'missing', ''} end
if state == ARGV[1] then return {'same', state} end
local allowed = false
for s in string.gmatch(ARGV[2], '[^,]+') do if s == state then allowed = true end end
if not allowed then return {'refused', state} end
for k, v in pairs(cjson.decode(ARGV[3])) do redis.call('HSET', KEYS[1], k, tostring(v)) end
redis.call('HSET', KEYS[1], 'state', ARGV[1])
return {'ok', state}
"""

# KEYS: 1 job hash, 2.. the new chunk hashes (indexes chunks_total, chunks_total+1, ...)
# ARGV: 1 now, 2 chunk size, 3 reason, 4 JSON list of frame lists, 5 expected chunks_total
# The rest of an auto-sized job, planned once: the chunks and the new total appear together with
# plan_pending cleared, so the completion gate never sees a partial total. Returns 1 or 0.
PLAN_REST = r"""
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
"""
