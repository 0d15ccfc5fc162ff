-- acquire_all: take several locks of one hash slot for one owner token, all or none (a
-- multi-lock). A lock already holding the token (an earlier attempt whose reply was lost)
-- counts as ours: its TTL is reset and a fresh fence taken. A fence is always above 2^48 (see
-- fence.lua, which this script starts with).
-- A busy lock's waiters marker is set when the caller will wait for its release message
-- (see acquire_many.lua and release_many.lua).
-- KEYS[3i-2]  the lock key of lock i (all keys of one call share one hash slot)
-- KEYS[3i-1]  its fencing counter (one Redis: shared; Redis Cluster: its hash slot's)
-- KEYS[3i]    the waiters marker of lock i
-- ARGV[1]     the owner token
-- ARGV[2]     the TTL of every lock in milliseconds (relative, never a timestamp)
-- ARGV[3]     the waiters marker's lifetime in ms if the caller waits when busy, else 0
-- Returns     {1, fence_1, ..., fence_n}  all acquired, with each lock's fencing token
--             {0, i, pttl}                lock i is held by another owner (pttl: its remaining
--                                         TTL in ms, -1 without expiry); nothing was taken
local n = #KEYS / 3
for i = 1, n do
  local v = redis.call('GET', KEYS[3 * i - 2])
  if v and v ~= ARGV[1] then
    if ARGV[3] ~= '0' then
      redis.call('SET', KEYS[3 * i], '1', 'PX', ARGV[3])
    end
    return {0, i, redis.call('PTTL', KEYS[3 * i - 2])}
  end
end
local out = {1}
for i = 1, n do
  redis.call('SET', KEYS[3 * i - 2], ARGV[1], 'PX', ARGV[2])
  out[i + 1] = fence(KEYS[3 * i - 1])
end
return out
