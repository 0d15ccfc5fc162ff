-- rw write: take the write lock if nobody writes and no live reader holds a share; else mark
-- ourselves as a waiting writer (a marker with its own lease, so a dead waiting writer blocks
-- new readers for at most that long), which keeps new readers out until we are in.
-- KEYS[1]  the writer key (value = owner token, PX = lease)
-- KEYS[2]  the readers (sorted set: reader token -> lease deadline, server ms)
-- KEYS[3]  the waiting writers (sorted set: writer token -> marker deadline, server ms)
-- KEYS[4]  the fencing counter of the lock's hash slot
-- ARGV[1]  our owner token
-- ARGV[2]  the lock's TTL in milliseconds
-- ARGV[3]  our waiting marker's lease in milliseconds; 0 = try once, leave no marker
-- Returns  {1, fence}    the write lock is ours (also when a lost reply had granted it already:
--                        then its lease is reset to the TTL from now, as the client believes,
--                        with a fresh fence, as the mutex does)
--          {0, wait_ms}  not yet: the writer's PTTL (-1 without expiry), or how long until the
--                        first reader's lease ends
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local writer = redis.call('GET', KEYS[1])
if writer == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, redis.call('INCR', KEYS[4])}
end
if not writer and redis.call('ZCARD', KEYS[2]) == 0 then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('ZREM', KEYS[3], ARGV[1])
  return {1, redis.call('INCR', KEYS[4])}
end
local marker = tonumber(ARGV[3])
if marker > 0 then
  redis.call('ZADD', KEYS[3], now + marker, ARGV[1])
  if redis.call('PTTL', KEYS[3]) < marker then
    redis.call('PEXPIRE', KEYS[3], marker)
  end
end
if writer then
  return {0, redis.call('PTTL', KEYS[1])}
end
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
return {0, math.max(0, tonumber(first[2]) - now)}
