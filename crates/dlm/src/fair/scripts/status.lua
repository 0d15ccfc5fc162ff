-- fair status: what an observer can know about a fair lock, in one round trip (read-only).
-- KEYS[1]  the holder key (value = owner token, PX = lease)
-- KEYS[2]  the queue (list of waiter tokens, arrival order)
-- KEYS[3]  the queue leases (sorted set: waiter token -> deadline, server ms)
-- KEYS[4]  the fencing counter of the lock's hash slot
-- Returns  {held, pttl, fence, waiting}
--          held     1 when somebody holds it, else 0
--          pttl     the holder's remaining TTL in ms (-1: no expiry, -2: not held)
--          fence    the last fencing token the slot's counter handed out (0: none yet)
--          waiting  the waiters whose queue lease has not run out
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local pttl = redis.call('PTTL', KEYS[1])
local held = 0
if pttl ~= -2 then held = 1 end
return {held, pttl, tonumber(redis.call('GET', KEYS[4]) or '0'),
  redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf')}
