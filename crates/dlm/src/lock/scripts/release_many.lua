-- release_many: token-checked release of one or more locks, waking their waiters. The client
-- batches concurrent releases into one call; each lock is decided on its own: deleted only if
-- it still holds the caller's token, and then a message is published on its wake-up channel.
-- KEYS[i]      the lock key of lock i (on Redis Cluster the caller groups them by hash slot)
-- ARGV[2i-1]   the owner token of lock i
-- ARGV[2i]     the wake-up channel of lock i (same hash tag as its key)
-- Returns      per lock: 1 released (and a message published on its channel),
--              0 the key is gone (expired), -1 held by another owner's token
local out = {}
for i = 1, #KEYS do
  local v = redis.call('GET', KEYS[i])
  if v == ARGV[2 * i - 1] then
    redis.call('DEL', KEYS[i])
    redis.call('PUBLISH', ARGV[2 * i], 'released')
    out[i] = 1
  elseif v == false then
    out[i] = 0
  else
    out[i] = -1
  end
end
return out
