-- status: what an observer can know about a lock, in one round trip.
-- KEYS[1]  the lock key
-- KEYS[2]  the lock's fencing counter (one Redis: shared; Redis Cluster: its hash slot's)
-- ARGV     none
-- Returns  {held, pttl, fence}
--          held   1 when the key exists, else 0
--          pttl   remaining TTL in ms (-1: no expiry, -2: no key)
--          fence  the last fencing token its counter handed out (0: none yet)
local pttl = redis.call('PTTL', KEYS[1])
local held = 0
if pttl ~= -2 then held = 1 end
return {held, pttl, tonumber(redis.call('GET', KEYS[2]) or '0')}
