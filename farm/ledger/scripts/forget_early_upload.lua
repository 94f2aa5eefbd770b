-- A job's early upload forgotten, and its chunks' parts in it (JobRecords.forget_early_upload),
-- only while the job has failed or was cancelled and still names that upload.
-- KEYS: 1 job hash, 2.. its chunk hashes
-- ARGV: 1 the upload's id, 2, 3 the job states it may be in (failed, cancelled), 4 the job's
--       early upload field, 5 the chunks' early part field
-- Returns 1 when forgotten, else 0.
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= ARGV[2] and state ~= ARGV[3] then return 0 end
if redis.call('HGET', KEYS[1], ARGV[4]) ~= ARGV[1] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[4])
for i = 2, #KEYS do redis.call('HDEL', KEYS[i], ARGV[5]) end
return 1
