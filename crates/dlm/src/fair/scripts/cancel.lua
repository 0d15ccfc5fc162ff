-- fair cancel: forget an acquisition that gave up (its wait ran out, its future was dropped):
-- leave the queue, and if a grant whose reply was lost made us the holder, release it. Either
-- way, when the lock is free, wake the (new) first waiter so the line moves on at once.
-- KEYS[1]  the holder key
-- KEYS[2]  the queue (list of waiter tokens)
-- KEYS[3]  the queue leases (sorted set: waiter token -> deadline, server ms)
-- ARGV[1]  the acquisition's owner token
-- ARGV[2]  the prefix of the waiters' wake-up channels
-- Returns  1 when something was removed (a queue entry or the lock), else 0
local removed = redis.call('LREM', KEYS[2], 0, ARGV[1]) + redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  removed = removed + 1
end
if removed > 0 and redis.call('EXISTS', KEYS[1]) == 0 then
  local head = redis.call('LINDEX', KEYS[2], 0)
  if head then
    redis.call('PUBLISH', ARGV[2] .. head, '1')
  end
end
return math.min(removed, 1)
