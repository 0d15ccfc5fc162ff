-- top: the due tasks (due time <= now), earliest first, without moving them.
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
-- ARGV[1]  how many at most
-- Returns  per task three values: id, due time (ms), payload (nil: none)
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local r = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
local out = {}
for i = 1, #r, 2 do
  out[#out + 1] = r[i]
  out[#out + 1] = tonumber(r[i + 1])
  out[#out + 1] = redis.call('HGET', KEYS[2], r[i])
end
return out
