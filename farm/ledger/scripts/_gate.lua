-- The completion gate, included by start_stitch and chunk_move: the job moves to 'stitching' for
-- exactly one caller, once every chunk is done, never while an auto-sized job's plan is pending
-- (chunks_total does not count the rest yet). Records the event; returns 1 for the winner, else 0.
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
