-- rw extend_many: a client's batched watchdog tick (and a single extend) for read shares and
-- write locks; extend each lease only if it is still ours.
-- KEYS[i]      the lease's key: the writer key (mode 'w') or the readers set (mode 'r'); on
--              Redis Cluster the caller groups them by hash slot
-- ARGV[3i-2]   the mode of KEYS[i]: 'r' or 'w'
-- ARGV[3i-1]   the owner token
-- ARGV[3i]     the new TTL in milliseconds, from now
-- Returns      per lease: 1 extended, 0 gone (expired), -1 the write lock holds another token;
--              or, in place of the code, a string: the message of a Redis error on this lease
--              alone (WRONGTYPE: its key holds something else), raised before any write of it.
--              The other leases are extended regardless (each runs under pcall).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
local function decide(i)
  local mode, token, ttl = ARGV[3 * i - 2], ARGV[3 * i - 1], tonumber(ARGV[3 * i])
  if mode == 'r' then
    local score = tonumber(redis.call('ZSCORE', KEYS[i], token))
    if score and score > now then
      redis.call('ZADD', KEYS[i], now + ttl, token)
      if redis.call('PTTL', KEYS[i]) < ttl then
        redis.call('PEXPIRE', KEYS[i], ttl)
      end
      out[i] = 1
    else
      if score then
        redis.call('ZREM', KEYS[i], token)
      end
      out[i] = 0
    end
  else
    local v = redis.call('GET', KEYS[i])
    if v == token then
      redis.call('PEXPIRE', KEYS[i], ttl)
      out[i] = 1
    elseif v == false then
      out[i] = 0
    else
      out[i] = -1
    end
  end
end
for i = 1, #KEYS do
  local ok, err = pcall(decide, i)
  if not ok then
    if type(err) == 'table' then err = err.err end
    out[i] = tostring(err)
  end
end
return out
