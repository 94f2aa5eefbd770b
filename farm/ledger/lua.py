"""The ledger's atomic transitions, as Redis Lua scripts (one round trip, no races)."""

from __future__ import annotations

from collections.abc import Iterable

from farm.core.pipeline import PHASES, running_states
from farm.core.state import ENDED


def _lua_set(names: Iterable[str]) -> str:
    """A Lua table literal usable as a set: ({['a']=true, ['b']=true})."""
    return "({" + ", ".join(f"['{n}']=true" for n in sorted(names)) + "})"


# A pause's end, shared by JOB_MOVE and CHUNK_MOVE (a job that fails while paused): the time the
# job stood still is added to its paused_s, from the later of its pause and the end of the last
# attempt that ran on after it (`held_end`: running chunks finish during a pause, and the frames
# they make are the job's progress, so their time is not paused time).
_PAUSE = r"""
local function end_pause(job, now)  -- the job is paused: its callers know
  local p = redis.call('HMGET', job, 'paused', 'held_end')
  local since = tonumber(p[1] or '')
  if not since then return end
  local held = tonumber(p[2] or '')
  if held and held > since then since = held end
  redis.call('HINCRBYFLOAT', job, 'paused_s', math.max(tonumber(now) - since, 0))
end
"""

# The completion gate, shared by START_STITCH and CHUNK_MOVE: the job moves to 'stitching' for
# exactly one caller, once every chunk is done, never while an auto-sized job's plan is pending
# (chunks_total does not count the rest yet). Records the event; returns 1 for the winner, else 0.
_GATE = r"""
local function open_gate(job, events, now, winner)
  local j = redis.call('HMGET', job, 'state', 'plan_pending', 'chunks_done', 'chunks_total',
    'stitch_token')
  if j[1] == 'stitching' and winner ~= '' and j[5] == winner then
    return 1  -- the winner's retried call (its first reply was lost): it still sends the stitch
  end
  if j[1] ~= 'running' or j[2] == '1' or tonumber(j[3]) ~= tonumber(j[4]) then return 0 end
  redis.call('HSET', job, 'state', 'stitching', 'stitch_started', now, 'stitch_token', winner)
  if redis.call('RPUSH', events,
      '{"t": ' .. string.format('%.3f', tonumber(now)) .. ', "event": "stitch-gate"}') > 5000 then
    redis.call('LTRIM', events, -5000, -1)
  end
  return 1
end
"""

# KEYS: 1 chunk hash, 2 job hash, 3 leases zset, 4 job cost hash, 5 job attempts list,
#       6 job events list, 7 job blocklist hash, 8 job frame records hash
# ARGV: 1 target, 2 allowed sources (csv), 3 token ('' = any), 4 lease member,
#       5 lease expiry ('' = drop lease), 6 JSON fields to set, 7 mode, 8 new token suffix,
#       9 now, 10 max failures, 11 the event's JSON after its opening brace ('' = none; its
#       "event" is chunk-<where the chunk went>), 12 flags: 'b' a claim of a job with a budget
#       stops with 'budget' (the caller prices it, then claims again without 'b'); 'g' a chunk
#       done (now or already) tries the completion gate; 'r' a claim returns the job, the chunk's
#       frames and their records; 13 a worker whose claim stops with 'blocked' once it has
#       failed the job ARGV 14 times ('' = no check)
# Returns {status, previous_state, token_or_state, target, gate_won, job, frames, records} (the
# last three JSON, claims with 'r' only); status: ok | same | refused | stale | missing |
# budget | blocked. One round trip for the move, its event, the attempt's meter, the gate and
# the reads a claim needs; the chunk is read with one HMGET and written with one HSET. A call sent
# again after its answer was lost answers as it did: a move 'same', a claim 'ok' with its token
# (ARGV 8, the call's own, ends it) and previous_state = target, changing nothing.
CHUNK_MOVE = (
    _GATE
    + _PAUSE
    + r"""
local c = redis.call('HMGET', KEYS[1], 'state', 'token', 'attempt', 'retry', 'claims', 'started',
  'claimed_at', 'lease_expires', 'price_per_s', 'instance_type', 'lifecycle', 'index',
  'alone_per_s', 'accruing', 'lane')
local state = c[1]
if not state then return {'missing', '', ''} end
local j = redis.call('HMGET', KEYS[2], 'state', 'max_cost')
local jstate = j[1]
local target = ARGV[1]
local mode = ARGV[7]
local flags = ARGV[12]
local function claim_answer(previous, token)
  if not string.find(flags, 'r', 1, true) then return {'ok', previous, token, target, 0} end
  -- What the attempt reads next, here rather than in three more round trips, each as one JSON
  -- text (cheap to parse): the job, the chunk's frames, and the records of those frames only
  -- (not the job's every frame).
  local frames_json = redis.call('HGET', KEYS[1], 'frames') or '[]'
  local frames = cjson.decode(frames_json)
  local records = {}
  local any = false
  for first = 1, #frames, 1000 do  -- HMGET in slices: unpack() is bounded by Lua's stack
    local names = {}
    for i = first, math.min(first + 999, #frames) do names[#names + 1] = tostring(frames[i]) end
    for i, value in ipairs(redis.call('HMGET', KEYS[8], unpack(names))) do
      if value then records[names[i]] = value; any = true end
    end
  end
  local job = {}
  local flat = redis.call('HGETALL', KEYS[2])
  for i = 1, #flat, 2 do job[flat[i]] = flat[i + 1] end
  return {'ok', previous, token, target, 0, cjson.encode(job), frames_json,
    any and cjson.encode(records) or '{}'}
end
-- An attempt's share of the job's running spend ('accruing': "PER_S CLAIMED_AT", as its claim
-- added it) taken back out of the cost hash's sums; true when there was one.
local function take_back(accruing)
  local per_s, at = string.match(accruing or '', '^(%S+) (%S+)$')
  if not per_s then return false end
  redis.call('HINCRBYFLOAT', KEYS[4], 'run_per_s', -tonumber(per_s))
  redis.call('HINCRBYFLOAT', KEYS[4], 'run_base', -tonumber(per_s) * tonumber(at))
  return true
end
if state == target and mode == 'claim' and c[2] and
   string.sub(c[2], -#ARGV[8] - 1) == '-' .. ARGV[8] then
  -- This very claim, sent again (its reply was lost and the client retried the same call): it
  -- took the chunk then, so it answers as it did, with its token; previous = the target.
  return claim_answer(state, c[2])
end
if state == target and mode ~= 'claim' then
  if ARGV[3] ~= '' and c[2] ~= ARGV[3] then return {'stale', state, ''} end
  local won = 0
  if target == 'done' and string.find(flags, 'g', 1, true) then  -- a retried call
    won = open_gate(KEYS[2], KEYS[6], ARGV[9], ARGV[3])
  end
  return {'same', state, '', target, won}
end
local allowed = false
for s in string.gmatch(ARGV[2], '[^,]+') do if s == state then allowed = true end end
if not allowed then return {'refused', state, jstate} end
if ARGV[3] ~= '' and c[2] ~= ARGV[3] then return {'stale', state, ''} end
if mode == 'expire' and (tonumber(c[8] or '0') or 0) > tonumber(ARGV[9]) then
  return {'refused', state, 'renewed'}  -- renewed since the reconciler looked: not expired
end
local fields = cjson.decode(ARGV[6])
local token = c[2] or ''
local pause_ends = false  -- the job fails while paused (below): its pause ends here
local sets = {}  -- the chunk's new fields, written by one HSET at the end (a later one wins)
local function set(k, v) sets[#sets + 1] = k; sets[#sets + 1] = v end
local function fail_job(why)  -- the chunk's budget is spent: it fails, and its job with it
  target = 'failed'
  if jstate ~= 'done' and jstate ~= 'failed' and jstate ~= 'cancelled' then
    pause_ends = jstate == 'paused'
    redis.call('HSET', KEYS[2], 'state', 'failed', 'finished', ARGV[9],
      'error', 'chunk ' .. c[12] .. why)
  end
end
if mode == 'claim' then
  if jstate ~= 'queued' and jstate ~= 'running' then return {'refused', state, jstate} end
  if ARGV[13] ~= '' then
    local failed = tonumber(redis.call('HGET', KEYS[7], ARGV[13]) or '0') or 0
    if failed >= tonumber(ARGV[14]) then return {'blocked', state, tostring(failed)} end
  end
  if string.find(flags, 'b', 1, true) and (tonumber(j[2] or '0') or 0) > 0 then
    return {'budget', state, jstate}
  end
  -- `attempt` counts tries of the chunk: a claim after a failure, lost lease, interruption or
  -- hand-back starts a new one; the next phase of a clean try keeps it.
  local attempt = tonumber(c[3] or '0') or 0
  if attempt == 0 or c[4] == '1' then
    attempt = attempt + 1
    set('attempt', attempt)
    set('retry', '0')
  end
  local claims = (tonumber(c[5] or '0') or 0) + 1
  token = tostring(attempt) .. ':' .. tostring(claims) .. '-' .. ARGV[8]
  set('claims', claims)
  set('token', token)
  if jstate == 'queued' then redis.call('HSET', KEYS[2], 'state', 'running', 'started', ARGV[9]) end
  if not c[6] then set('started', ARGV[9]) end
  set('claimed_at', ARGV[9])
  set('alone_per_s', '0')  -- a claim in the encode lane records its own (workers.host.alongside)
  set('lane', '0')
  -- The money a running attempt spends before it ends, for the job's spend (farm.core.cost):
  -- now * run_per_s - run_base over the job's running attempts; taken back at the attempt's end.
  -- 'accruing' still here: the attempt before was ended by a script from before this meter,
  -- which did not take its share back; it is taken back now.
  local stale = take_back(c[14])
  local per_s = tonumber(fields['price_per_s'] or '0') or 0
  if per_s > 0 then
    redis.call('HINCRBYFLOAT', KEYS[4], 'run_per_s', per_s)
    redis.call('HINCRBYFLOAT', KEYS[4], 'run_base', per_s * tonumber(ARGV[9]))
    set('accruing', fields['price_per_s'] .. ' ' .. ARGV[9])
  elseif stale then
    redis.call('HDEL', KEYS[1], 'accruing')
  end
elseif mode == 'fail' or mode == 'expire' then
  -- A failure spends the chunk's budget; a lost lease (a worker that vanished) spends a
  -- separate, larger one, so reclaimed spot instances do not fail jobs but a chunk that kills
  -- every worker it lands on still ends.
  local counter = (mode == 'fail') and 'failures' or 'lost_leases'
  local failures = redis.call('HINCRBY', KEYS[1], counter, 1)
  if failures >= tonumber(ARGV[10]) then
    fail_job(((mode == 'fail') and ' failed ' or ' lost its worker ') .. tostring(failures) ..
      ' times: ' .. (fields['error'] or 'unknown error'))
  end
elseif mode == 'interrupt' then
  -- Interruptions spend no failure, but a chunk interrupted without end is still stopped.
  local interruptions = redis.call('HINCRBY', KEYS[1], 'interruptions', 1)
  if tonumber(ARGV[10]) > 0 and interruptions >= 3 * tonumber(ARGV[10]) then
    fail_job(' was interrupted ' .. tostring(interruptions) .. ' times')
  end
end
if mode == 'fail' or mode == 'expire' or mode == 'interrupt' or mode == 'handback'
   or target == 'cancelled' then
  set('retry', '1')
end
-- The meter: an attempt ends when its chunk leaves a running state; its wall time is paid GPU
-- time at the price its claim recorded, wasted unless it left the chunk done for its phase. An
-- encode in the lane (workers.host.alongside) is claimed at no price, and its seconds with no paid
-- attempt beside it (`alone_s`, from the move that ends it) are charged at `alone_per_s`.
local claimed = tonumber(c[7] or '')
if mode ~= 'claim' and claimed and HELD[state] then
  local ended = tonumber(ARGV[9])
  if mode == 'expire' then  -- the worker vanished somewhere before its lease ran out
    local lease = tonumber(c[8] or '')
    if lease and lease < ended then ended = lease end
  end
  local secs = math.max(ended - claimed, 0)
  local per_s = tonumber(c[9] or '0') or 0
  local alone = math.min(math.max(tonumber(fields['alone_s'] or '0') or 0, 0), secs)
  local cost = secs * per_s + alone * (tonumber(c[13] or '0') or 0)
  -- The instance's GPU-seconds: a lane encode's seconds beside a paid attempt are that attempt's.
  local gpu_s = (c[15] == '1') and alone or secs
  local where = (c[10] or 'unknown') .. ':' .. (c[11] or 'local')
  local useful = USEFUL[target] == true
  if jstate == 'paused' then redis.call('HSET', KEYS[2], 'held_end', ended) end
  redis.call('HINCRBYFLOAT', KEYS[4], 'gpu_s', gpu_s)
  redis.call('HINCRBYFLOAT', KEYS[4], 'cost', cost)
  redis.call('HINCRBY', KEYS[4], 'attempts', 1)
  redis.call('HINCRBYFLOAT', KEYS[4], 'gpu_s:' .. where, gpu_s)
  if useful then
    local startup = math.min(tonumber(fields['blender_startup_s'] or 0) or 0, secs)
    redis.call('HINCRBYFLOAT', KEYS[4], 'startup_gpu_s', startup)
    redis.call('HINCRBYFLOAT', KEYS[4], 'startup_cost', startup * per_s)
  else
    redis.call('HINCRBYFLOAT', KEYS[4], 'wasted_gpu_s', gpu_s)
    redis.call('HINCRBYFLOAT', KEYS[4], 'wasted_cost', cost)
    redis.call('HINCRBY', KEYS[4], 'wasted_attempts', 1)
  end
  redis.call('HINCRBYFLOAT', KEYS[1], 'gpu_s', gpu_s)
  redis.call('HINCRBYFLOAT', KEYS[1], 'cost', cost)
  redis.call('HDEL', KEYS[1], 'claimed_at', 'accruing')
  take_back(c[14])  -- its share of the running spend, metered above now
  set('last_attempt_s', secs)
  redis.call('RPUSH', KEYS[5], cjson.encode({chunk = tonumber(c[12]),
    phase = state, ['end'] = target, mode = mode, s = secs, cost = cost, where = where,
    t = tonumber(ARGV[9])}))
end
if pause_ends then end_pause(KEYS[2], ARGV[9]) end  -- after held_end took this attempt's end
for k, v in pairs(fields) do set(k, tostring(v)) end
set('state', target)
set('updated', ARGV[9])
if target == 'done' then set('finished', ARGV[9]) end
redis.call('HSET', KEYS[1], unpack(sets))
if ARGV[5] ~= '' then
  redis.call('ZADD', KEYS[3], ARGV[5], ARGV[4])
else
  redis.call('ZREM', KEYS[3], ARGV[4])
end
if ARGV[11] ~= '' and
   redis.call('RPUSH', KEYS[6], '{"event": "chunk-' .. target .. '", ' .. ARGV[11]) > 5000 then
  redis.call('LTRIM', KEYS[6], -5000, -1)  -- the newest 5000, as Ledger.event keeps
end
local won = 0
if target == 'done' then
  redis.call('HINCRBY', KEYS[2], 'chunks_done', 1)
  if string.find(flags, 'g', 1, true) then won = open_gate(KEYS[2], KEYS[6], ARGV[9], ARGV[3]) end
end
if mode == 'claim' then return claim_answer(state, token) end
return {'ok', state, token, target, won}
""".replace("HELD", _lua_set(running_states()), 1).replace(
        "USEFUL", _lua_set(spec.done for spec in PHASES.values()), 1
    )
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

# KEYS: 1 live jobs zset, 2.. job hashes; ARGV: the jobs' ids, in KEYS' order. Each job leaves
# the live set only if it has still ended (or is gone): a retry may have reopened it since it
# was read.
DROP_ENDED = (
    r"""
local dropped = 0
for i = 2, #KEYS do
  local state = redis.call('HGET', KEYS[i], 'state')
  if not state or ENDED[state] then
    dropped = dropped + redis.call('ZREM', KEYS[1], ARGV[i - 1])
  end
end
return dropped
"""
).replace("ENDED", _lua_set(ENDED), 1)

# KEYS: 1 leases zset; ARGV: 1 the lease's member, 2 now. A lease the reconciler found expired
# leaves only if it still is: the chunk's next claim may have renewed it since.
DROP_EXPIRED = r"""
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if expiry and tonumber(expiry) <= tonumber(ARGV[2]) then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0
"""

# KEYS: 1 job hash, 2 job events list; ARGV: 1 now. The completion gate on its own (the
# reconciler's backstop; a worker's last done move opens it in CHUNK_MOVE).
START_STITCH = (
    _GATE
    + r"""
return open_gate(KEYS[1], KEYS[2], ARGV[1], '')
"""
)

# KEYS: 1 job hash, 2 leases zset; ARGV: 1 target, 2 allowed sources csv, 3 JSON fields, 4 now,
# 5 the job's id. A job leaving 'paused' adds the pause to its paused_s (what the ETA leaves out
# of the time it has run), unless one of its chunks still holds a lease: none starts during a
# pause, so that chunk ran all through it and the job never stood still.
JOB_MOVE = (
    _PAUSE
    + r"""
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
"""
)

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
"""
