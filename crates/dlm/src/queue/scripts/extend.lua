-- extend: renew the leases of running tasks (a worker's heartbeat, batched).
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
-- ARGV[1]  new lease length in ms, from now
-- ARGV[2..] per task two values: id, lease fencing token
-- Returns  per task: 1 extended, 0 not in flight any more, -1 leased to another worker
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = now + tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  local lease = redis.call('HGET', KEYS[4], id)
  if lease == ARGV[i + 1] then
    redis.call('ZADD', KEYS[3], 'XX', deadline, id)
    out[#out + 1] = 1
  elseif lease then
    out[#out + 1] = -1
  else
    out[#out + 1] = 0
  end
end
return out
