-- extend_many: a client's batched watchdog tick for semaphore holders; renew each holder's
-- leases only if they have not run out (by the Redis server's clock).
-- KEYS[i]      the holders' sorted set of holder i (on Redis Cluster the caller groups by slot)
-- ARGV[3i-2]   holder i's token
-- ARGV[3i-1]   how many permits holder i holds
-- ARGV[3i]     holder i's new lease in milliseconds, from now
-- Returns      per holder: 1 extended, 0 its leases had run out (expired; removed)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i = 1, #KEYS do
  local token, n = ARGV[3 * i - 2], tonumber(ARGV[3 * i - 1])
  local deadline = now + tonumber(ARGV[3 * i])
  local score = redis.call('ZSCORE', KEYS[i], token .. ':1')
  if score and tonumber(score) > now then
    for j = 1, n do
      redis.call('ZADD', KEYS[i], 'XX', deadline, token .. ':' .. j)
    end
    local last = redis.call('ZRANGE', KEYS[i], -1, -1, 'WITHSCORES')
    redis.call('PEXPIREAT', KEYS[i], last[2])
    out[i] = 1
  else
    for j = 1, n do
      redis.call('ZREM', KEYS[i], token .. ':' .. j)
    end
    out[i] = 0
  end
end
return out
