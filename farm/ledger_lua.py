"""The ledger's atomic transitions, as Redis Lua scripts (one round trip, no races)."""

from __future__ import annotations

from collections.abc import Iterable

from farm.pipeline import PHASES, running_states


def _lua_set(names: Iterable[str]) -> str:
    """A Lua table literal usable as a set: ({['a']=true, ['b']=true})."""
    return "({" + ", ".join(f"['{n}']=true" for n in sorted(names)) + "})"


# KEYS: 1 chunk hash, 2 job hash, 3 leases zset, 4 job cost hash, 5 job attempts list
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
  -- `attempt` counts tries of the chunk: a claim after a failure, lost lease, interruption or
  -- hand-back starts a new one; the next phase of a clean try keeps it.
  local attempt = tonumber(redis.call('HGET', KEYS[1], 'attempt') or '0')
  if attempt == 0 or redis.call('HGET', KEYS[1], 'retry') == '1' then
    attempt = redis.call('HINCRBY', KEYS[1], 'attempt', 1)
    redis.call('HSET', KEYS[1], 'retry', '0')
  end
  local claims = redis.call('HINCRBY', KEYS[1], 'claims', 1)
  token = tostring(attempt) .. ':' .. tostring(claims) .. '-' .. ARGV[8]
  redis.call('HSET', KEYS[1], 'token', token)
  if jstate == 'queued' then redis.call('HSET', KEYS[2], 'state', 'running', 'started', ARGV[9]) end
  if not redis.call('HGET', KEYS[1], 'started') then redis.call('HSET', KEYS[1], 'started', ARGV[9]) end
  redis.call('HSET', KEYS[1], 'claimed_at', ARGV[9])
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
if mode == 'fail' or mode == 'expire' or mode == 'interrupt' or mode == 'handback'
   or target == 'cancelled' then
  redis.call('HSET', KEYS[1], 'retry', '1')
end
local fields = cjson.decode(ARGV[6])
-- The meter: an attempt ends when its chunk leaves a running state; its wall time is paid GPU
-- time at the price its claim recorded, wasted unless it left the chunk done for its phase.
local claimed = tonumber(redis.call('HGET', KEYS[1], 'claimed_at') or '')
if mode ~= 'claim' and claimed and HELD[state] then
  local ended = tonumber(ARGV[9])
  if mode == 'expire' then  -- the worker vanished somewhere before its lease ran out
    local lease = tonumber(redis.call('HGET', KEYS[1], 'lease_expires') or '')
    if lease and lease < ended then ended = lease end
  end
  local secs = math.max(ended - claimed, 0)
  local per_s = tonumber(redis.call('HGET', KEYS[1], 'price_per_s') or '0') or 0
  local where = (redis.call('HGET', KEYS[1], 'instance_type') or 'unknown') .. ':' ..
    (redis.call('HGET', KEYS[1], 'lifecycle') or 'local')
  local useful = USEFUL[target] == true
  redis.call('HINCRBYFLOAT', KEYS[4], 'gpu_s', secs)
  redis.call('HINCRBYFLOAT', KEYS[4], 'cost', secs * per_s)
  redis.call('HINCRBY', KEYS[4], 'attempts', 1)
  redis.call('HINCRBYFLOAT', KEYS[4], 'gpu_s:' .. where, secs)
  if useful then
    local startup = math.min(tonumber(fields['blender_startup_s'] or 0) or 0, secs)
    redis.call('HINCRBYFLOAT', KEYS[4], 'startup_gpu_s', startup)
    redis.call('HINCRBYFLOAT', KEYS[4], 'startup_cost', startup * per_s)
  else
    redis.call('HINCRBYFLOAT', KEYS[4], 'wasted_gpu_s', secs)
    redis.call('HINCRBYFLOAT', KEYS[4], 'wasted_cost', secs * per_s)
    redis.call('HINCRBY', KEYS[4], 'wasted_attempts', 1)
  end
  redis.call('HINCRBYFLOAT', KEYS[1], 'gpu_s', secs)
  redis.call('HINCRBYFLOAT', KEYS[1], 'cost', secs * per_s)
  redis.call('HSET', KEYS[1], 'last_attempt_s', secs)
  redis.call('HDEL', KEYS[1], 'claimed_at')
  redis.call('RPUSH', KEYS[5], cjson.encode({chunk = tonumber(redis.call('HGET', KEYS[1], 'index')),
    phase = state, ['end'] = target, mode = mode, s = secs, cost = secs * per_s, where = where,
    t = tonumber(ARGV[9])}))
end
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
""".replace("HELD", _lua_set(running_states()), 1).replace(
    "USEFUL", _lua_set(spec.done for spec in PHASES.values()), 1
)

# KEYS: 1 chunk hash, 2 leases zset; ARGV: 1 token, 2 new expiry, 3 member, 4 job hash key
# Returns 'ok', 'lost' (another attempt owns it) or 'cancelled'. The states that hold a lease
# come from the pipeline. 'split:N' is 'ok' for a chunk split by SPLIT: stop after frame N.
RENEW = (
    r"""
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
"""
).replace("RUNNING", _lua_set(running_states()), 1)

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

# KEYS: 1 the running chunk's hash, 2 job hash, 3 the new chunk's hash (index = chunks_total)
# ARGV: 1 the owner's token, 2 last frame the owner keeps (N), 3 expected chunks_total, 4 now,
#       5 fewest frames the new chunk may take
# No idle tail: a rendering chunk keeps its frames <= N and a new queued chunk takes the rest,
# with chunks_total grown in the same step, so the completion gate counts it. Only while the
# chunk still renders under the same attempt, beyond the frame its owner is on, never while the
# plan is pending. Returns {1, new index, kept, moved} or {0, why}.
SPLIT = r"""
if redis.call('HGET', KEYS[2], 'state') ~= 'running' then return {0, 'job not running'} end
if redis.call('HGET', KEYS[2], 'plan_pending') == '1' then return {0, 'plan pending'} end
local total = tonumber(redis.call('HGET', KEYS[2], 'chunks_total'))
if total ~= tonumber(ARGV[3]) then return {0, 'chunks changed'} end
if redis.call('EXISTS', KEYS[3]) == 1 then return {0, 'chunks changed'} end
if redis.call('HGET', KEYS[1], 'state') ~= 'rendering' then return {0, 'not rendering'} end
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return {0, 'another attempt'} end
local last = tonumber(ARGV[2])
local on = tonumber(redis.call('HGET', KEYS[1], 'frame_on') or '')
if on and last <= on then return {0, 'owner past the split'} end
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
return {1, total, #keep, #rest}
"""
