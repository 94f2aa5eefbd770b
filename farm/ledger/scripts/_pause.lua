-- A pause's end, included by chunk_move and job_move (a job that fails while paused): the time
-- the job stood still is added to its paused_s, from the later of its pause and the end of the
-- last attempt that ran on after it (`held_end`: running chunks finish during a pause, and the
-- frames they make are the job's progress, so their time is not paused time).
local function end_pause(job, now)  -- the job is paused: its callers know
  local p = redis.call('HMGET', job, 'paused', 'held_end')
  local since = tonumber(p[1] or '')
  if not since then return end
  local held = tonumber(p[2] or '')
  if held and held > since then since = held end
  redis.call('HINCRBYFLOAT', job, 'paused_s', math.max(tonumber(now) - since, 0))
end
