-- acquire_all: take several locks of one hash slot for one owner token, all or none (a
-- multi-lock). A lock already holding the token (an earlier attempt whose reply was lost)
-- counts as ours: its TTL is reset and its slot's current counter returned as its fence.
-- KEYS[2i-1]  the lock key of lock i (all keys of one call share one hash slot)
-- KEYS[2i]    the fencing counter of that key's hash slot
-- ARGV[1]     the owner token
-- ARGV[2]     the TTL of every lock in milliseconds (relative, never a timestamp)
-- Returns     {1, fence_1, ..., fence_n}  all acquired, with each lock's fencing token
--             {0, i, pttl}                lock i is held by another owner (pttl: its remaining
--                                         TTL in ms, -1 without expiry); nothing was taken
local n = #KEYS / 2
local mine = {}
for i = 1, n do
  local v = redis.call('GET', KEYS[2 * i - 1])
  if v and v ~= ARGV[1] then
    return {0, i, redis.call('PTTL', KEYS[2 * i - 1])}
  end
  mine[i] = (v == ARGV[1])
end
local out = {1}
for i = 1, n do
  redis.call('SET', KEYS[2 * i - 1], ARGV[1], 'PX', ARGV[2])
  if mine[i] then
    out[i + 1] = tonumber(redis.call('GET', KEYS[2 * i]) or '0')
  else
    out[i + 1] = redis.call('INCR', KEYS[2 * i])
  end
end
return out
