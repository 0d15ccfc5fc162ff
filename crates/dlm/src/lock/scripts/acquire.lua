-- acquire: one attempt to take a lock.
-- KEYS[1]  the lock key
-- KEYS[2]  the fencing counter of the lock key's hash slot (shared by the locks of that slot,
--          so it never decreases for any of them)
-- ARGV[1]  the owner token of this acquisition
-- ARGV[2]  the TTL in milliseconds (a relative duration, never a timestamp)
-- Returns  {1, fence}  acquired; fence is the new value of the counter
--          {1, fence}  also when the key already holds ARGV[1] (an earlier attempt of this
--                      same acquisition succeeded but its reply was lost): TTL is reset and the
--                      current counter is returned (>= the value that attempt took, and lower
--                      than any later holder's)
--          {0, pttl}   held by another owner; pttl is its remaining TTL in ms (-1: no expiry)
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, redis.call('INCR', KEYS[2])}
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}
end
return {0, redis.call('PTTL', KEYS[1])}
