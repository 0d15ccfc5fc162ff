-- acquire_many: one attempt each at one or more locks. The client batches concurrent acquires
-- into one call; each lock is decided on its own: SET NX PX, then a fencing token from the
-- INCR of its slot's counter. An earlier attempt of the same acquisition whose reply was lost
-- (the key already holds this token) counts as acquired: the TTL is reset and the current
-- counter returned (>= the fence that attempt took, and lower than any later holder's).
-- KEYS[2i-1]  the lock key of lock i
-- KEYS[2i]    the fencing counter of that key's hash slot (on Redis Cluster the caller
--             groups the locks of one call by hash slot)
-- ARGV[2i-1]  the owner token of lock i's acquisition
-- ARGV[2i]    the TTL of lock i in milliseconds (a relative duration, never a timestamp)
-- Returns     a flat array, two entries per lock, for lock i at 2i-1 and 2i:
--             1, fence   acquired (or already held by this token: TTL reset, current counter)
--             0, pttl    held by another owner; its remaining TTL in ms (-1: no expiry)
local out = {}
for i = 1, #KEYS / 2 do
  local key, counter = KEYS[2 * i - 1], KEYS[2 * i]
  local token, ttl = ARGV[2 * i - 1], ARGV[2 * i]
  if redis.call('SET', key, token, 'NX', 'PX', ttl) then
    out[2 * i - 1], out[2 * i] = 1, redis.call('INCR', counter)
  elseif redis.call('GET', key) == token then
    redis.call('PEXPIRE', key, ttl)
    out[2 * i - 1], out[2 * i] = 1, tonumber(redis.call('GET', counter) or '0')
  else
    out[2 * i - 1], out[2 * i] = 0, redis.call('PTTL', key)
  end
end
return out
