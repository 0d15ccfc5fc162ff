-- release_to: hand a lock we hold straight to a waiting acquisition of the same client, so
-- that the next holder needs no acquire round trip (and nobody can cut in between).
-- KEYS[1]  the lock key
-- KEYS[2]  the lock's fencing counter (one Redis: shared; Redis Cluster: its hash slot's)
-- ARGV[1]  our owner token
-- ARGV[2]  the successor's owner token
-- ARGV[3]  the successor's TTL in milliseconds (relative, never a timestamp)
-- Returns  {1, fence}  handed over; fence is the successor's fencing token (the new counter,
--                      always above 2^48: see fence.lua, which this script starts with)
--          {0, 0}      the key is gone: our lock had expired (nothing handed over)
--          {-1, 0}     the key holds another owner's token (nothing handed over)
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return {1, fence(KEYS[2])}
elseif v == false then
  return {0, 0}
end
return {-1, 0}
