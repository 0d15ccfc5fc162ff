-- rw status: what an observer can know about a read-write lock, in one round trip (read-only).
-- KEYS[1]  the writer key (value = owner token, PX = lease)
-- KEYS[2]  the readers: a sorted set, reader token -> lease deadline (server ms)
-- KEYS[3]  the waiting writers: a sorted set, writer token -> marker deadline (server ms)
-- KEYS[4]  the fencing counter of the lock's hash slot
-- Returns  {writer, pttl, readers, waiting_writers, fence}
--          writer           1 when a writer holds it, else 0
--          pttl             the writer's remaining TTL in ms (-1: no expiry, -2: no writer)
--          readers          read shares whose lease has not run out
--          waiting_writers  writers waiting whose marker has not run out
--          fence            the last fencing token the slot's counter handed out (0: none yet)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local pttl = redis.call('PTTL', KEYS[1])
local writer = 0
if pttl ~= -2 then writer = 1 end
return {writer, pttl,
  redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf'),
  redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf'),
  tonumber(redis.call('GET', KEYS[4]) or '0')}
