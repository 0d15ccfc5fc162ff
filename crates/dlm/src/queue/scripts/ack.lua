-- ack: finish tasks whose lease is still ours; delete them (no history kept).
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
-- Returns  per task: 1 acked, 0 not in flight any more (lease expired and
--          returned), -1 leased to another worker now (re-claimed)
local out = {}
for i = 1, #ARGV, 2 do
  local id = ARGV[i]
  local lease = redis.call('HGET', KEYS[4], id)
  if lease == ARGV[i + 1] then
    redis.call('ZREM', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
    if not redis.call('ZSCORE', KEYS[1], id) then
      redis.call('HDEL', KEYS[2], id)
      redis.call('HDEL', KEYS[5], id)
      redis.call('HDEL', KEYS[7], id)
    end
    redis.call('HINCRBY', KEYS[9], 'processed', 1)
    out[#out + 1] = 1
  elseif lease then
    out[#out + 1] = -1
  else
    out[#out + 1] = 0
  end
end
return out
