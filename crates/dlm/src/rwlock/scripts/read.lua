-- rw read: take a read share unless a writer holds the lock or waits for it (writer
-- preference: a waiting writer is not starved by a stream of readers). Each reader has its own
-- lease (its score); readers and waiting writers whose lease ran out are dropped first.
-- KEYS[1]  the writer key (value = owner token, PX = lease)
-- KEYS[2]  the readers: a sorted set, reader token -> lease deadline (server time, ms)
-- KEYS[3]  the waiting writers: a sorted set, writer token -> marker deadline (server ms)
-- KEYS[4]  the fencing counter of the lock's hash slot
-- ARGV[1]  our owner token
-- ARGV[2]  the share's TTL in milliseconds
-- Returns  {1, fence}    a read share is ours (also when a lost reply had granted it already:
--                        then its lease is reset to the TTL from now, as the client believes,
--                        with a fresh fence, as the mutex does; the counter's current value
--                        may be another reader's)
--          {0, wait_ms}  a writer holds it (its PTTL, -1 without expiry) or waits for it (until
--                        the first waiting writer's marker runs out)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local ttl = tonumber(ARGV[2])
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
  if redis.call('PTTL', KEYS[2]) < ttl then
    redis.call('PEXPIRE', KEYS[2], ttl)
  end
  return {1, redis.call('INCR', KEYS[4])}
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('PTTL', KEYS[1])}
end
local waiting = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
if waiting[1] then
  return {0, math.max(0, tonumber(waiting[2]) - now)}
end
redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[2]) < ttl then
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return {1, redis.call('INCR', KEYS[4])}
