-- release_to: give back a holder's permits and, in the same step, grant a waiting acquisition of
-- the same client its permits if they fit, so that it needs no acquire round trip of its own.
-- KEYS[1]  the semaphore's hash: `permits` (the capacity), `fence` (the fencing counter)
-- KEYS[2]  the holders' sorted set (one member TOKEN:i per permit, scored by lease deadline)
-- ARGV[1]  our token
-- ARGV[2]  how many permits we hold
-- ARGV[3]  the successor's token
-- ARGV[4]  how many permits the successor wants
-- ARGV[5]  the successor's lease in milliseconds (relative)
-- ARGV[6]  the semaphore's wake-up channel (same hash tag)
-- Returns  {1, fence}  handed over: ours released, the successor's taken; fence is its token
--          {2, 0}      released, but the successor's permits do not fit: published instead
--          {0, 0}      our leases had run out already: nothing done
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = redis.call('ZSCORE', KEYS[2], ARGV[1] .. ':1')
if not score or tonumber(score) <= now then
  return {0, 0}
end
for i = 1, tonumber(ARGV[2]) do
  redis.call('ZREM', KEYS[2], ARGV[1] .. ':' .. i)
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local n = tonumber(ARGV[4])
local cap = tonumber(redis.call('HGET', KEYS[1], 'permits') or '0')
if redis.call('ZCARD', KEYS[2]) + n > cap then
  redis.call('PUBLISH', ARGV[6], 'released')
  return {2, 0}
end
local deadline = now + tonumber(ARGV[5])
for i = 1, n do
  redis.call('ZADD', KEYS[2], deadline, ARGV[3] .. ':' .. i)
end
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[2], last[2])
return {1, redis.call('HINCRBY', KEYS[1], 'fence', 1)}
