-- acquire: take N permits of a semaphore for one holder, all or none, if they fit under the
-- capacity. Leases that ran out by the Redis server's clock are purged first, so a crashed
-- holder's permits come back at its TTL. The stored capacity counts; the one given is stored only
-- when none is (the first use); set_permits changes it. Holders above a lowered capacity keep their
-- permits; new ones wait until theirs fit.
-- An earlier attempt of the same acquisition whose reply was lost, or a hand-over to it that
-- raced this attempt (its members are there), counts as acquired: its leases are reset and a new
-- fencing token is drawn (the counter is shared by concurrent holders, so only a fresh one is
-- known to be this holder's alone).
-- KEYS[1]  the semaphore's hash: `permits` (the capacity), `fence` (the fencing counter)
-- KEYS[2]  the holders: one member TOKEN:i per permit held, scored by its lease deadline
--          (ms, Redis server time); the key expires with its last lease
-- ARGV[1]  the holder's token
-- ARGV[2]  how many permits it wants (1 ..= capacity)
-- ARGV[3]  the lease in milliseconds (relative, never a timestamp)
-- ARGV[4]  the capacity to store when none is
-- Returns  {1, fence, free, capacity}  acquired; fence: this holder's fencing token; free: permits
--                                      left; capacity: the stored capacity
--          {0, wait, free, capacity}   not enough free; wait: ms until the earliest lease ends
--                                      (-1: none)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local token, n = ARGV[1], tonumber(ARGV[2])
local deadline = now + tonumber(ARGV[3])
redis.call('HSETNX', KEYS[1], 'permits', ARGV[4])
local cap = tonumber(redis.call('HGET', KEYS[1], 'permits'))
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local function hold()
  for i = 1, n do
    redis.call('ZADD', KEYS[2], deadline, token .. ':' .. i)
  end
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', KEYS[2], last[2])
end
if redis.call('ZSCORE', KEYS[2], token .. ':1') then
  hold()
  local fence = redis.call('HINCRBY', KEYS[1], 'fence', 1)
  return {1, fence, math.max(cap - redis.call('ZCARD', KEYS[2]), 0), cap}
end
local used = redis.call('ZCARD', KEYS[2])
if used + n <= cap then
  hold()
  return {1, redis.call('HINCRBY', KEYS[1], 'fence', 1), cap - used - n, cap}
end
local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
local wait = -1
if first[2] then
  wait = tonumber(first[2]) - now
end
return {0, wait, math.max(cap - used, 0), cap}
