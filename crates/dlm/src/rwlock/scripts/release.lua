-- rw release: give back a read share or the write lock, if it is still ours, and wake whoever
-- may enter now: a waiting writer once the last reader is gone or a writer leaves while writers
-- wait (channel KEYS "writable"), else the readers (channel "readable").
-- KEYS[1]  the writer key
-- KEYS[2]  the readers (sorted set: reader token -> lease deadline, server ms)
-- KEYS[3]  the waiting writers (sorted set: writer token -> marker deadline, server ms)
-- ARGV[1]  our owner token
-- ARGV[2]  'r' to give back a read share, 'w' the write lock
-- ARGV[3]  the channel published when readers may enter
-- ARGV[4]  the channel published when a writer may enter
-- Returns  1   released
--          0   it was gone: our lease had expired
--          -1  the write lock holds another owner's token
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local code
if ARGV[2] == 'r' then
  local score = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1]))
  code = 0
  if score then
    redis.call('ZREM', KEYS[2], ARGV[1])
    if score > now then
      code = 1
    end
  end
else
  local v = redis.call('GET', KEYS[1])
  if v ~= ARGV[1] then
    if v == false then
      return 0
    end
    return -1
  end
  redis.call('DEL', KEYS[1])
  code = 1
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
if redis.call('EXISTS', KEYS[1]) == 0 then
  if redis.call('ZCARD', KEYS[3]) > 0 then
    if redis.call('ZCARD', KEYS[2]) == 0 then
      redis.call('PUBLISH', ARGV[4], '1')
    end
  elseif ARGV[2] == 'w' then
    redis.call('PUBLISH', ARGV[3], '1')
  end
end
return code
