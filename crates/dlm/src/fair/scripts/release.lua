-- fair release: delete the holder key if it is ours, then wake exactly the next live waiter
-- (waiters whose queue lease ran out are dropped from the head first). No herd: only that
-- waiter's channel is published to.
-- KEYS[1]  the holder key
-- KEYS[2]  the queue (list of waiter tokens)
-- KEYS[3]  the queue leases (sorted set: waiter token -> deadline, server ms)
-- ARGV[1]  our owner token
-- ARGV[2]  the prefix of the waiters' wake-up channels
-- Returns  {1, next}  released; next = the token of the waiter woken ('' when none waits)
--          {0, ''}    the key is gone: our lock had expired
--          {-1, ''}   the key holds another owner's token
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] then
  if v == false then
    return {0, ''}
  end
  return {-1, ''}
end
redis.call('DEL', KEYS[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for _ = 1, 1000 do
  local head = redis.call('LINDEX', KEYS[2], 0)
  if not head then
    return {1, ''}
  end
  local deadline = tonumber(redis.call('ZSCORE', KEYS[3], head))
  if deadline and deadline > now then
    redis.call('PUBLISH', ARGV[2] .. head, '1')
    return {1, head}
  end
  redis.call('LPOP', KEYS[2])
  redis.call('ZREM', KEYS[3], head)
end
return {1, ''}
