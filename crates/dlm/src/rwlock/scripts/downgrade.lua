-- rw downgrade: turn the write lock we hold into a read share in one step (nobody can take
-- the lock in between), and let waiting readers in unless a writer waits.
-- KEYS[1]  the writer key
-- KEYS[2]  the readers (sorted set: reader token -> lease deadline, server ms)
-- KEYS[3]  the waiting writers (sorted set: writer token -> marker deadline, server ms)
-- ARGV[1]  our owner token (it stays the read share's token)
-- ARGV[2]  the read share's TTL in milliseconds
-- ARGV[3]  the channel published when readers may enter
-- Returns  1   downgraded
--          0   the write lock was gone: it had expired
--          -1  the write lock holds another owner's token
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] then
  if v == false then
    return 0
  end
  return -1
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('DEL', KEYS[1])
redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[2]) < ttl then
  redis.call('PEXPIRE', KEYS[2], ttl)
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
if redis.call('ZCARD', KEYS[3]) == 0 then
  redis.call('PUBLISH', ARGV[3], '1')
end
return 1
