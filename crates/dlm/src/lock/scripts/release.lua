-- release: delete the lock only if it is still ours, and wake up waiters.
-- KEYS[1]  the lock key
-- ARGV[1]  the owner token
-- ARGV[2]  the wake-up channel of that lock (same hash tag as the key)
-- Returns  1   released (and a message was published on ARGV[2])
--          0   the key is gone: the lock had expired
--          -1  the key holds another owner's token: not ours any more
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], 'released')
  return 1
elseif v == false then
  return 0
end
return -1
