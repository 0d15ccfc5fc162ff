-- acquire_many: one attempt each at one or more locks. The client batches concurrent acquires
-- into one call; each lock is decided on its own: SET NX PX, then a fencing token from the
-- INCR of its counter. An earlier attempt of the same acquisition whose reply was lost (the
-- key already holds this token) counts as acquired: the TTL is reset and a fresh fence taken
-- (higher than the one that attempt took, lower than any later holder's).
-- A fence is always above 2^48 (dlm::keys::FENCE_FLOOR): see fence.lua, which this script
-- starts with.
-- A busy attempt whose caller will wait for the release message sets the lock's waiters
-- marker, so that the release publishes one (release_many.lua); the caller tries again at
-- least once per marker lifetime, so a marker never lapses while it still waits.
-- On one Redis a first attempt is a plain MULTI of INCRBY and SET NX PX (lock/batch.rs), whose
-- leftovers settle_many.lua decides; this script makes the retries (after a busy attempt or a
-- lost reply) and every attempt on a Redis Cluster.
-- KEYS[3i-2]  the lock key of lock i
-- KEYS[3i-1]  its fencing counter (one Redis: shared; Redis Cluster: its hash slot's, and the
--             caller groups the locks of one call by hash slot)
-- KEYS[3i]    the waiters marker of lock i (same hash tag as its key)
-- ARGV[3i-2]  the owner token of lock i's acquisition
-- ARGV[3i-1]  the TTL of lock i in milliseconds (a relative duration, never a timestamp)
-- ARGV[3i]    the waiters marker's lifetime in ms if the caller waits when busy, else 0
-- Returns     a flat array, two entries per lock, for lock i at 2i-1 and 2i:
--             1, fence   acquired (or already held by this token: TTL reset, fresh fence)
--             0, pttl    held by another owner; its remaining TTL in ms (-1: no expiry)
--             -4, msg    a Redis error while deciding this lock alone (e.g. WRONGTYPE: its key
--                        holds no string; or its fencing counter holds no integer): msg is what
--                        Redis said. The other locks of the call are decided regardless (each
--                        decision runs under pcall: a redis.call error would abort the script,
--                        failing every lock of the call, earlier ones granted in Redis
--                        nonetheless). Undone in the error path: a key this decision found or
--                        made holding the token (only the fence can fail after that) is
--                        deleted, so a failed attempt leaves its lock held by nobody.
local out = {}
-- The key of the lock being decided once it holds the caller's token (until its fence is taken).
local mine
local function decide(i)
  local key, counter = KEYS[3 * i - 2], KEYS[3 * i - 1]
  local token, ttl = ARGV[3 * i - 2], ARGV[3 * i - 1]
  if redis.call('SET', key, token, 'NX', 'PX', ttl) then
    mine = key
    out[2 * i - 1], out[2 * i] = 1, fence(counter)
  elseif redis.call('GET', key) == token then
    mine = key
    redis.call('PEXPIRE', key, ttl)
    out[2 * i - 1], out[2 * i] = 1, fence(counter)
  else
    if ARGV[3 * i] ~= '0' then
      redis.call('SET', KEYS[3 * i], '1', 'PX', ARGV[3 * i])
    end
    out[2 * i - 1], out[2 * i] = 0, redis.call('PTTL', key)
  end
end
for i = 1, #KEYS / 3 do
  mine = nil
  local ok, err = pcall(decide, i)
  if not ok then
    if mine then
      redis.call('DEL', mine)
    end
    if type(err) == 'table' then err = err.err end
    out[2 * i - 1], out[2 * i] = -4, tostring(err)
  end
end
return out
