-- A job field set once (JobRecords.job_field_once): of workers racing to set it, all get the
-- first one's.
-- KEYS: 1 job hash; ARGV: 1 field, 2 value ('' = only read). Returns the field's value, '' for a
-- job that is gone.
if redis.call('EXISTS', KEYS[1]) == 0 then return '' end
if ARGV[2] ~= '' then redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) end
return redis.call('HGET', KEYS[1], ARGV[1]) or ''
