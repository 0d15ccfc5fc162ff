-- abandon: give leased tasks back at once (graceful shutdown); the attempt
-- does not count.
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
-- ARGV     per task two values: id, lease fencing token
-- Returns  how many were given back
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = 0
for i = 1, #ARGV, 2 do
  local id = ARGV[i]
  if redis.call('HGET', KEYS[4], id) == ARGV[i + 1] then
    redis.call('ZREM', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
    redis.call('ZADD', KEYS[1], 'NX', now, id)
    redis.call('HINCRBY', KEYS[5], id, -1)
    n = n + 1
  end
end
if n > 0 then
  redis.call('LPUSH', KEYS[10], '1')
  redis.call('LTRIM', KEYS[10], 0, 63)
end
return n
