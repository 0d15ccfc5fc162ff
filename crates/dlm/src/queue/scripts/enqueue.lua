-- enqueue: add tasks due at now + delay; an id already waiting or in flight is
-- kept (mode 'keep') or replaced (mode 'replace': new due time and payload).
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
-- ARGV[1]  delay in ms (>= 0)
-- ARGV[2]  'keep' or 'replace'
-- ARGV[3..] per task three values: id, '1' with payload / '0' without, payload
-- Returns  per task two values: status (1 added, 0 kept as it was, 2 replaced),
--          and the task's due time (ms; -1 for a kept task that is in flight)
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = now + tonumber(ARGV[1])
local replace = ARGV[2] == 'replace'
local out, added = {}, 0
for i = 3, #ARGV, 3 do
  local id = ARGV[i]
  local cur = redis.call('ZSCORE', KEYS[1], id)
  local flying = redis.call('ZSCORE', KEYS[3], id)
  if (cur or flying) and not replace then
    out[#out + 1] = 0
    out[#out + 1] = tonumber(cur or -1)
  else
    redis.call('ZADD', KEYS[1], score, id)
    if ARGV[i + 1] == '1' then
      redis.call('HSET', KEYS[2], id, ARGV[i + 2])
    else
      redis.call('HDEL', KEYS[2], id)
    end
    if not cur then
      redis.call('HDEL', KEYS[5], id)
    end
    redis.call('ZREM', KEYS[6], id)
    redis.call('HDEL', KEYS[7], id)
    if cur or flying then out[#out + 1] = 2 else out[#out + 1] = 1 end
    out[#out + 1] = score
    added = added + 1
  end
end
if added > 0 then
  local marks = {}
  for _ = 1, math.min(added, 64) do marks[#marks + 1] = '1' end
  redis.call('LPUSH', KEYS[10], unpack(marks))
  redis.call('LTRIM', KEYS[10], 0, 63)
end
return out
