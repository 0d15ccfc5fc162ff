-- fair acquire: take the lock if it is free and we are first in line (or nobody waits); else
-- queue up (once) and refresh our queue lease. Waiters whose queue lease ran out are dropped
-- from the head first, so a dead waiter stalls the line for at most its own lease.
-- KEYS[1]  the holder key (value = owner token, PX = lease)
-- KEYS[2]  the queue: a list of waiter tokens in arrival order
-- KEYS[3]  the queue leases: a sorted set, waiter token -> deadline (server time, ms)
-- KEYS[4]  the fencing counter of the lock's hash slot
-- ARGV[1]  our owner token (also our waiter id)
-- ARGV[2]  the lock's TTL in milliseconds
-- ARGV[3]  our queue lease in milliseconds; 0 = try once, do not queue
-- ARGV[4]  the prefix of the waiters' wake-up channels (the channel is prefix .. token)
-- ARGV[5]  the most waiters the queue may hold
-- Returns  {1, fence}            acquired (also when a lost reply had granted it already: then
--                                its lease is reset to the TTL from now, as the client
--                                believes, with a fresh fence, as the mutex does)
--          {0, wait_ms, pos}     not acquired; pos = our place in line (1 = next, 0 = not
--                                queued); wait_ms = the holder's PTTL (-1: no expiry), or, while
--                                the lock is free, how long until the first waiter's lease ends
--          {-2, max, 0}          the queue is full
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local me = ARGV[1]
local purged = false
for _ = 1, 1000 do
  local head = redis.call('LINDEX', KEYS[2], 0)
  if not head or head == me then break end
  local deadline = tonumber(redis.call('ZSCORE', KEYS[3], head))
  if deadline and deadline > now then break end
  redis.call('LPOP', KEYS[2])
  redis.call('ZREM', KEYS[3], head)
  purged = true
end
local holder = redis.call('GET', KEYS[1])
if holder == me then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, redis.call('INCR', KEYS[4])}
end
local head = redis.call('LINDEX', KEYS[2], 0)
if not holder and (not head or head == me) then
  redis.call('SET', KEYS[1], me, 'PX', ARGV[2])
  if head == me then
    redis.call('LPOP', KEYS[2])
    redis.call('ZREM', KEYS[3], me)
  end
  return {1, redis.call('INCR', KEYS[4])}
end
if purged and not holder then
  redis.call('PUBLISH', ARGV[4] .. head, '1')
end
local wait
if holder then
  wait = redis.call('PTTL', KEYS[1])
else
  wait = math.max(0, (tonumber(redis.call('ZSCORE', KEYS[3], head)) or now) - now)
end
local lease = tonumber(ARGV[3])
if lease == 0 then
  return {0, wait, 0}
end
local pos = redis.call('LPOS', KEYS[2], me)
if not pos then
  local len = redis.call('LLEN', KEYS[2])
  if len >= tonumber(ARGV[5]) then
    return {-2, tonumber(ARGV[5]), 0}
  end
  redis.call('RPUSH', KEYS[2], me)
  pos = len
end
redis.call('ZADD', KEYS[3], now + lease, me)
for i = 2, 3 do
  if redis.call('PTTL', KEYS[i]) < lease then
    redis.call('PEXPIRE', KEYS[i], lease)
  end
end
return {0, wait, pos + 1}
