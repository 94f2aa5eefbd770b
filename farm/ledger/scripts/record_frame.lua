-- A frame verified in the store, recorded by the attempt that holds its chunk (Ledger.record_frame):
-- an attempt that lost its claim records nothing, so a record always names the winner's objects.
-- KEYS: 1 chunk hash (read only with a token or fields), 2 frames hash, 3 renders hash, 4 job hash
-- ARGV: 1 token ('' = whoever holds the chunk), 2 frame, 3 record (size:sha256:writer),
--       4 frame bytes, 5 File Output bytes, 6 '1': the job's first_frame_at unless set,
--       7 now, 8 JSON fields for the chunk
-- Returns {1, the job's File Output bytes} once recorded, {0, the same} for a lost claim.
if ARGV[1] ~= '' and redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then
  return {0, tonumber(redis.call('HGET', KEYS[4], 'file_output_bytes') or '0')}
end
if redis.call('HGET', KEYS[2], ARGV[2]) == ARGV[3] then
  -- This very record, sent again (its reply was lost and redis-py retried the call: the record
  -- names the attempt's own claim): it counted then, so it answers as it did, counting nothing.
  return {1, tonumber(redis.call('HGET', KEYS[4], 'file_output_bytes') or '0')}
end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('HINCRBY', KEYS[3], ARGV[2], 1)
redis.call('HINCRBY', KEYS[4], 'frame_bytes', ARGV[4])  -- bytes moved (census)
local outputs = tonumber(redis.call('HGET', KEYS[4], 'file_output_bytes') or '0')
if tonumber(ARGV[5]) > 0 then
  outputs = redis.call('HINCRBY', KEYS[4], 'file_output_bytes', ARGV[5])
end
for field, value in pairs(cjson.decode(ARGV[8])) do
  redis.call('HSET', KEYS[1], field, value)
end
if ARGV[6] == '1' then redis.call('HSETNX', KEYS[4], 'first_frame_at', ARGV[7]) end
return {1, outputs}
