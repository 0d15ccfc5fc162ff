-- retry_dead: move dead tasks back to the queue, due now, with attempts reset.
-- KEYS (every queue script gets the same ten, all sharing the {queue} hash tag):
--   1 waiting   ZSET  id -> due time (ms, server clock)
--   2 payload   HASH  id -> payload bytes (absent: no payload)
--   3 inflight  ZSET  id -> lease deadline (ms, server clock)
--   4 lease     HASH  id -> fencing token of the current lease
--   5 attempts  HASH  id -> times claimed
--   6 dead      ZSET  id -> time it died (ms)
--   7 errors    HASH  id -> last error text
--   8 fence     STRING  lease fencing counter (INCR)
--   9 stats     HASH  processed, failed
--  10 signal    LIST  wake-up markers for idle workers (at most 64)
-- ARGV[1]  'ids': ARGV[2..] are the ids; 'all': ARGV[2] = N, up to N dead tasks (the caller loops)
-- Returns  how many were moved
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ids = {}
if ARGV[1] == 'all' then
  ids = redis.call('ZRANGE', KEYS[6], 0, tonumber(ARGV[2]) - 1)
else
  for i = 2, #ARGV do ids[#ids + 1] = ARGV[i] end
end
local n = 0
for _, id in ipairs(ids) do
  if redis.call('ZREM', KEYS[6], id) == 1 then
    redis.call('HDEL', KEYS[7], id)
    redis.call('HDEL', KEYS[5], id)
    redis.call('ZADD', KEYS[1], 'NX', now, id)
    n = n + 1
  end
end
if n > 0 then
  redis.call('LPUSH', KEYS[10], '1')
  redis.call('LTRIM', KEYS[10], 0, 63)
end
return n
