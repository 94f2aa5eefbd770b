-- A chunk's move, claim or end of attempt (Ledger.move_chunk, claim, move_then_claim).
-- KEYS: 1 chunk hash, 2 job hash, 3 leases zset, 4 job cost hash, 5 job attempts list,
--       6 job events list, 7 job blocklist hash, 8 job frame records hash
-- ARGV: 1 target, 2 allowed sources (csv), 3 token ('' = any), 4 lease member,
--       5 lease expiry ('' = drop lease), 6 JSON fields to set, 7 mode, 8 new token suffix,
--       9 now, 10 max failures, 11 the event's JSON after its opening brace ('' = none; its
--       "event" is chunk-<where the chunk went>), 12 flags: 'b' a claim of a job with a budget
--       stops with 'budget' (the caller prices it, then claims again without 'b'); 'g' a chunk
--       done (now or already) tries the completion gate; 'r' a claim returns the job, the chunk's
--       frames and their records; 13 a worker whose claim stops with 'blocked' once it has
--       failed the job ARGV 14 times ('' = no check)
-- Returns {status, previous_state, token_or_state, target, gate_won, job, frames, records} (the
-- last three JSON, claims with 'r' only); status: ok | same | refused | stale | missing |
-- budget | blocked. One round trip for the move, its event, the attempt's meter, the gate and
-- the reads a claim needs; the chunk is read with one HMGET and written with one HSET. A call sent
-- again after its answer was lost answers as it did: a move 'same', a claim 'ok' with its token
-- (ARGV 8, the call's own, ends it) and previous_state = target, changing nothing.
{{ include gate }}
{{ include pause }}
local HELD = {{ RUNNING }}  -- the states an attempt runs in: leaving one ends it (the meter)
local USEFUL = {{ DONE }}  -- each phase's done state: an attempt that reached one was not wasted
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
