-- release_many: token-checked release of one or more locks, waking their waiters. The client
-- batches concurrent releases into one call; each lock is decided on its own: deleted only if
-- it still holds the caller's token. A message is published on its wake-up channel only when
-- its waiters marker exists (someone may wait: acquire_many.lua / acquire_all.lua set it), and
-- the marker is deleted with it: a waiter that is still busy after the wake-up sets it again,
-- and one that set it after this release finds the lock free on its next attempt.
-- Two commands whatever the batch's size: one MGET reads every lock and marker, one DEL
-- removes the released locks and their markers (a redis.call costs more than the key lookups
-- it makes; one GET and one DEL per lock cost Redis about a third more per release). A batch
-- of one lock takes a shorter path: GET, then one DEL of the lock and its marker.
-- Why reading with MGET and deleting with a later DEL is safe: both run inside this one script,
-- and while a script runs Redis runs no other command and expires no key (its clock is frozen at
-- the script's start), so a key that held the caller's token at the MGET still holds it at the
-- DEL: nobody can take the lock in between, and no expiry can free it for somebody else.
-- KEYS[2i-1]   the lock key of lock i (on Redis Cluster the caller groups them by hash slot)
-- KEYS[2i]     the waiters marker of lock i (same hash tag as its key)
-- ARGV[2i-1]   the owner token of lock i
-- ARGV[2i]     the wake-up channel of lock i (same hash tag as its key)
-- Returns      per lock: 1 released (and its waiters woken, if any),
--              0 the key is gone (expired; also a key that holds no string, which no lock
--              writes), -1 held by another owner's token
-- Errors       none per lock in a batch of two or more: every read goes through MGET (or
--              redis.pcall'ed GETs), which read a key of another type (a damaged lock or
--              marker) as none, and DEL and PUBLISH raise for no key type; so one damaged lock
--              never fails the others of its call. A batch of one raises WRONGTYPE for its
--              lock key holding no string (it is that lock's error alone).
if #KEYS == 2 then
  -- One lock (a batch of one, the usual case at low concurrency): no tables, no unpack.
  local v = redis.call('GET', KEYS[1])
  if v == ARGV[1] then
    if redis.call('DEL', KEYS[1], KEYS[2]) == 2 then
      redis.call('PUBLISH', ARGV[2], 'released')
    end
    return {1}
  elseif v == false then
    return {0}
  end
  return {-1}
end
local values = redis.pcall('MGET', unpack(KEYS))
if values.err then
  -- A user whose ACL predates dlm's use of MGET (dlm::keys::ACL_RULES): one GET per key. A key
  -- that holds no string reads as none, as MGET reads it (GET raises WRONGTYPE for it, which
  -- would abort the script and fail every release of the call).
  values = {}
  for i = 1, #KEYS do
    local v = redis.pcall('GET', KEYS[i])
    values[i] = type(v) ~= 'table' and v
  end
end
local out, gone = {}, {}
for i = 1, #KEYS / 2 do
  local v = values[2 * i - 1]
  if v == ARGV[2 * i - 1] then
    gone[#gone + 1] = KEYS[2 * i - 1]
    if values[2 * i] then
      gone[#gone + 1] = KEYS[2 * i]
      redis.call('PUBLISH', ARGV[2 * i], 'released')
    end
    out[i] = 1
  elseif v == false then
    out[i] = 0
  else
    out[i] = -1
  end
end
if #gone > 0 then
  redis.call('DEL', unpack(gone))
end
return out
