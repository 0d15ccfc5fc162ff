-- claim: first return expired leases to the queue (or to the dead set after
-- max attempts), then lease up to ARGV[1] due tasks, earliest first.
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
-- ARGV[1]  how many to claim (0: only return expired leases)
-- ARGV[2]  lease length in ms
-- ARGV[3]  max attempts (a task whose lease expired on its last attempt dies)
-- ARGV[4]  how many expired leases to return at most in this call
-- Returns  {expired_returned, ms_until_next_due (-1: nothing waiting), now (ms),
--           died (how many of the expired moved to the dead set),
--           then per claimed task five values: id, due time, payload (nil: none),
--           lease fencing token, attempt number (1 = first)}
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease_ms, max_attempts = tonumber(ARGV[2]), tonumber(ARGV[3])
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, tonumber(ARGV[4]))
local died = 0
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[3], id)
  redis.call('HDEL', KEYS[4], id)
  local attempts = tonumber(redis.call('HGET', KEYS[5], id) or '0')
  if attempts >= max_attempts and not redis.call('ZSCORE', KEYS[1], id) then
    redis.call('ZADD', KEYS[6], now, id)
    redis.call('HSET', KEYS[7], id, 'lease expired on attempt ' .. attempts)
    redis.call('HINCRBY', KEYS[9], 'failed', 1)
    died = died + 1
  else
    redis.call('ZADD', KEYS[1], 'NX', now, id)
  end
end
local out = {#expired, -1, now, died}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
local n = #due / 2
if n > 0 then
  -- A few commands for the whole batch, not a few per task; in chunks, as
  -- Lua's unpack() is limited to a few thousand values.
  local function chunked(cmd, key, list)
    for i = 1, #list, 2000 do
      redis.call(cmd, key, unpack(list, i, math.min(i + 1999, #list)))
    end
  end
  local function hmget(key, list)
    local all = {}
    for i = 1, #list, 2000 do
      local part = redis.call('HMGET', key, unpack(list, i, math.min(i + 1999, #list)))
      for k = 1, #part do all[#all + 1] = part[k] end
    end
    return all
  end
  local ids = {}
  for i = 1, n do ids[i] = due[2 * i - 1] end
  -- The due tasks are the n lowest scores: ranks 0 .. n-1.
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, n - 1)
  local first_fence = redis.call('INCRBY', KEYS[8], n) - n + 1
  local payloads = hmget(KEYS[2], ids)
  local attempts = hmget(KEYS[5], ids)
  local leases, flying, counts = {}, {}, {}
  local deadline = now + lease_ms
  for i = 1, n do
    local id, fence = ids[i], first_fence + i - 1
    local attempt = tonumber(attempts[i] or '0') + 1
    leases[2 * i - 1], leases[2 * i] = id, fence
    flying[2 * i - 1], flying[2 * i] = deadline, id
    counts[2 * i - 1], counts[2 * i] = id, attempt
    out[#out + 1] = id
    out[#out + 1] = tonumber(due[2 * i])
    out[#out + 1] = payloads[i]
    out[#out + 1] = fence
    out[#out + 1] = attempt
  end
  chunked('HSET', KEYS[4], leases)
  chunked('ZADD', KEYS[3], flying)
  chunked('HSET', KEYS[5], counts)
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if first[2] then
  out[2] = math.max(0, tonumber(first[2]) - now)
end
return out
