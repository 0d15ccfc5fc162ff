-- settle_many: decide the acquires that the fast path's transaction (lock/batch.rs: MULTI;
-- INCRBY; SET NX PX ...; EXEC) left undecided, without ever taking a free lock. The
-- transaction already made each attempt; between it and this call the caller's own release of
-- the same token may have run (a Redlock decided on other nodes, a caller that gave up), and
-- taking the lock again here would leave it held for nobody until its TTL. So:
-- * the key holds the caller's token (its SET NX granted, but the counter was below the fence
--   floor, or its INCRBY failed; or MULTI was refused and the SET ran alone): granted, its TTL
--   reset and a fresh fence taken (fence.lua, which this script starts with: above 2^48);
-- * another token: busy; the waiters marker is set when the caller will wait (as in
--   acquire_many.lua), and the holder's remaining TTL returned;
-- A fence taken here, later than the transaction, is still in grant order for its lock: the key
-- held this caller's token from the transaction's SET until now, so no other grant of the lock can
-- have happened in between, and the fence comes from the same counter after every earlier grant's.
-- * no key: busy, with 0 ms left (it was taken when the transaction ran and is free now: the
--   caller tries again at once, through acquire_many.lua).
-- KEYS[3i-2]  the lock key of lock i
-- KEYS[3i-1]  its fencing counter (the transaction only runs on one Redis: the shared one)
-- KEYS[3i]    the waiters marker of lock i (same hash tag as its key)
-- ARGV[3i-2]  the owner token of lock i's acquisition
-- ARGV[3i-1]  the TTL of lock i in milliseconds (a relative duration, never a timestamp)
-- ARGV[3i]    the waiters marker's lifetime in ms if the caller waits when busy, else 0
-- Returns     a flat array, two entries per lock, for lock i at 2i-1 and 2i:
--             1, fence   granted (held by this token: TTL reset, fresh fence)
--             0, pttl    busy: the holder's remaining TTL in ms (-1: no expiry; 0: free now)
--             -4, msg    a Redis error while deciding this lock alone (e.g. WRONGTYPE: its key
--                        holds no string; or its fencing counter holds no integer, which the
--                        transaction's INCRBY also found: then every lock of it comes here):
--                        msg is what Redis said. The other locks of the call are decided
--                        regardless (each decision runs under pcall, as in acquire_many.lua).
--                        Undone in the error path: a key found holding the token (only the
--                        fence can fail after that) is deleted, so a failed attempt leaves its
--                        lock held by nobody (the transaction's grant included).
local out = {}
-- The key of the lock being decided once it is found holding the caller's token.
local mine
local function decide(i)
  local key = KEYS[3 * i - 2]
  local v = redis.call('GET', key)
  if v == ARGV[3 * i - 2] then
    mine = key
    redis.call('PEXPIRE', key, ARGV[3 * i - 1])
    out[2 * i - 1], out[2 * i] = 1, fence(KEYS[3 * i - 1])
  elseif v then
    if ARGV[3 * i] ~= '0' then
      redis.call('SET', KEYS[3 * i], '1', 'PX', ARGV[3 * i])
    end
    out[2 * i - 1], out[2 * i] = 0, redis.call('PTTL', key)
  else
    out[2 * i - 1], out[2 * i] = 0, 0
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
