-- rw cancel: forget an acquisition that gave up: drop its waiting-writer marker, and a read
-- share or write lock a grant whose reply was lost gave it. If that lets anybody in, wake them.
-- KEYS[1]  the writer key
-- KEYS[2]  the readers (sorted set: reader token -> lease deadline, server ms)
-- KEYS[3]  the waiting writers (sorted set: writer token -> marker deadline, server ms)
-- ARGV[1]  the acquisition's owner token
-- ARGV[2]  the channel published when readers may enter
-- ARGV[3]  the channel published when a writer may enter
-- Returns  1 when something was removed, else 0
local removed = redis.call('ZREM', KEYS[3], ARGV[1]) + redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  removed = removed + 1
end
if removed > 0 and redis.call('EXISTS', KEYS[1]) == 0 then
  if redis.call('ZCARD', KEYS[3]) == 0 then
    redis.call('PUBLISH', ARGV[2], '1')
  elseif redis.call('ZCARD', KEYS[2]) == 0 then
    redis.call('PUBLISH', ARGV[3], '1')
  end
end
return math.min(removed, 1)
