-- A webhook notice put in the outbox once per arrival (Outbox.announce).
-- KEYS: 1 the once-only marker, 2 the outbox zset; ARGV: 1 member, 2 due, 3 marker TTL (s)
-- Returns 1 when put in, 0 when it was already.
if redis.call('SET', KEYS[1], '1', 'NX', 'EX', tonumber(ARGV[3])) then
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
  return 1
end
return 0
